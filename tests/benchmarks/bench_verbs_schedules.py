"""Schedules explored at the verbs boundary: schedules per second and distinct schedules reached.

    python tests/benchmarks/bench_verbs_schedules.py [--schedules 200] [--strategies mix,pct,random]
        [--release 0.3.13.post1 --scenarios stale_completion_after_retry,...] [--real-schedules 40]

Part one runs the planted stale-completion program (tests/verbs/stale_wr_id.c, "tagged" mode,
so no schedule stops the exploration early) for ``--schedules`` schedules per strategy, one
process per schedule. Part two (with ``--release``) runs the suites' CO-9 exploration of each
scenario on that release's engines (one engine pair per exploration, one transfer per schedule,
``--mc-schedules=--real-schedules``) and prints the summary each exploration records (schedules,
distinct label sequences, seconds).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "verbs"))

from stale_program import build_program, scenario  # noqa: E402

from pytest_mooncake.targets.reference.schedule_strategies import (  # noqa: E402
    REFERENCE_STRATEGIES as SOURCE,
)
from pytest_mooncake.verbs import EmulatedFabric  # noqa: E402
from pytest_mooncake.verbs.boundary_exploration import explore  # noqa: E402

SUITE = "suites/rdma/test_completion_ownership.py"


def program_part(schedules: int, strategies: list[str]) -> None:
    exe = build_program()
    print(f"planted program ({exe.name}, tagged): {schedules} schedules per strategy")
    for strategy in strategies:
        with tempfile.TemporaryDirectory(prefix="vs-", dir="/tmp") as tmp, \
                EmulatedFabric.create("mlx5_0", run_dir=Path(tmp) / "f", seed=1) as fabric:
            sc = scenario(fabric, "tagged", exe)
            start = time.monotonic()
            result = explore(SOURCE, sc, schedules, strategy, seed=1)
            took = time.monotonic() - start
        print(f"  {strategy:<7} {result.schedules / took:6.1f} schedules/s, "
              f"{result.distinct} distinct of {result.schedules}")
    for mode in ("reuse",):
        with tempfile.TemporaryDirectory(prefix="vs-", dir="/tmp") as tmp, \
                EmulatedFabric.create("mlx5_0", run_dir=Path(tmp) / "f", seed=1) as fabric:
            firsts = []
            for seed in range(10):
                found = explore(SOURCE, scenario(fabric, mode, exe), 200, "mix", seed=seed)
                firsts.append(found.schedules if found.failure else None)
        print(f"  planted defect ({mode}): first violating schedule over 10 seeds: {firsts}")


def real_part(release: str, scenarios: list[str], schedules: int) -> None:
    with tempfile.TemporaryDirectory(prefix="vs-real-") as tmp:
        junit = Path(tmp) / "junit.xml"
        keyword = " or ".join(scenarios)
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_mooncake",
                SUITE, "-k", f"test_invariants_hold_under_every_explored_interleaving and "
                f"({keyword})", f"--mc-target=mooncake=={release}", f"--mc-schedules={schedules}",
                "--mc-seed=1", "-n", "0", "-q", f"--junitxml={junit}"]
        start = time.monotonic()
        subprocess.run(argv, cwd=ROOT, check=False, capture_output=True, timeout=3600)
        took = time.monotonic() - start
        print(f"{release}: {len(scenarios)} exploration(s) in {took:.0f} s (engine start included)")
        for case in ET.parse(junit).iter("testcase") if junit.exists() else []:
            for prop in case.iter("property"):
                if prop.get("name") == "mc_exploration":
                    text = prop.get("value", "")
                    n, secs = text.split(": ")[1].split(" ")[0], text.split(" in ")[1].split(" s")[0]
                    print(f"  {text}  ({int(n) / float(secs):.2f} schedules/s)")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=200)
    ap.add_argument("--strategies", default="mix,pct,random")
    ap.add_argument("--release", default="")
    ap.add_argument("--scenarios", default="stale_completion_after_retry,partial_post_bad_wr,"
                    "completion_error_retire_while_posting,qp_fatal_races_completion")
    ap.add_argument("--real-schedules", type=int, default=40)
    args = ap.parse_args(argv)
    program_part(args.schedules, args.strategies.split(","))
    if args.release:
        real_part(args.release, args.scenarios.split(","), args.real_schedules)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
