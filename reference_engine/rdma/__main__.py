"""``python -m reference_engine.rdma``: list, run, explore and replay the RDMA scenarios.

    python -m reference_engine.rdma scenarios
    python -m reference_engine.rdma run NAME [--profile legacy] [--dedicated-poller]
    python -m reference_engine.rdma explore NAME [--profile legacy] [--schedules 500]
                                           [--strategy mix|pct|random] [--seed 1] [--depth 3]
    python -m reference_engine.rdma replay TOKEN [--trace]

Exit status: 0 when no invariant was violated, 1 when one was, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from reference_engine.profiles import PROFILES
from reference_engine.rdma.sim.exploration import STRATEGIES, Outcome, explore, replay, run_once
from reference_engine.rdma.sim.scenarios import EXTRA_SCENARIOS, SCENARIOS
from reference_engine.rdma.sim.scheduler import RoundRobin, ScheduleError

DEDICATED = {"MC_RDMA_DEDICATED_POLLER": "1"}


def _report(outcome: Outcome, trace: bool = False) -> int:
    if trace:
        for actor, point in outcome.trace:
            print(f"  {actor:24} {point}")
    print(f"{outcome.scenario} on {outcome.profile}: {outcome.steps} steps, "
          f"{'quiescent' if outcome.quiescent else 'NOT quiescent'}, stats {outcome.stats}")
    for v in outcome.violations:
        print(f"  VIOLATION {v}")
    print(f"  replay token: {outcome.token}")
    print(f"  exact token:  {outcome.exact_token}")
    return 1 if outcome.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_engine.rdma",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    sub.add_parser("scenarios", help="list the scenarios (the RFC's testing-plan interleavings)",
                   description="Print the name of every scenario, one a line.")
    for name, what in (("run", "run one scenario, pinned to the interleaving the RFC describes"),
                       ("explore", "run a scenario under many schedules until one breaks an "
                                   "invariant")):
        p = sub.add_parser(name, help=what, description=what[0].upper() + what[1:] + "; exit 1 "
                           "on a violation, printing its replay tokens.",
                           epilog=f"example: python -m reference_engine.rdma {name} "
                                  f"stale_completion_after_retry --profile legacy")
        p.add_argument("scenario", help="a name 'scenarios' prints")
        p.add_argument("--profile", choices=tuple(PROFILES), default="rfc",
                       help="rfc (default) or legacy (Mooncake 0.3.13's completion path)")
        p.add_argument("--dedicated-poller", action="store_true",
                       help="the dedicated-poller worker model (MC_RDMA_DEDICATED_POLLER=1) "
                            "instead of the shared one")
        if name == "explore":
            p.add_argument("--schedules", type=int, default=500, metavar="N",
                           help="schedules to try before giving up (default 500)")
            p.add_argument("--strategy", choices=STRATEGIES, default="mix",
                           help="mix (default): PCT and random walk alternately")
            p.add_argument("--seed", type=int, default=0,
                           help="seed of the schedule choices (default 0); the same seed "
                                "explores the same schedules")
            p.add_argument("--depth", type=int, default=None,
                           help="PCT bug depth (default: pct 2, mix 12)")
    p = sub.add_parser("replay", help="run exactly the schedule a token names",
                       description="Run exactly the schedule a token names (from run, explore "
                                   "or a failing test's --mc-replay); exit 1 on a violation.",
                       epilog="example: python -m reference_engine.rdma replay mcs1.eyJ... --trace")
    p.add_argument("token", help="a replay or exact token (mcs1....)")
    p.add_argument("--trace", action="store_true", help="print every step")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "scenarios":
            for name in (*SCENARIOS, *EXTRA_SCENARIOS):
                print(name)
            return 0
        env = DEDICATED if getattr(args, "dedicated_poller", False) else {}
        if args.cmd == "run":
            return _report(run_once(args.scenario, args.profile, RoundRobin(), env, pinned=True))
        if args.cmd == "explore":
            result = explore(args.scenario, args.profile, args.schedules, args.strategy,
                             args.seed, args.depth, env=env)
            if not result.found:
                print(f"{args.scenario} on {args.profile}: no violation in "
                      f"{result.schedules} schedules")
                return 0
            print(f"violation after {result.schedules} schedule(s)")
            return _report(result.failure)
        return _report(replay(args.token, record_trace=args.trace), trace=args.trace)
    except (ValueError, ScheduleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
