"""How reliably an exploration finds a real build's deadlock: the first violating schedule per seed.

    python tests/benchmarks/bench_deadlock_detection.py --release 0.3.13.post1 \
        [--strategies mix,pct] [--seeds 1-10] [--schedules 100] \
        [--scenarios qp_fatal_races_completion,reclaim_with_pending_completions]

For each strategy and seed, one pytest session runs the suites' CO-9 explorations of the
scenarios with ``--mc-schedules=--schedules`` (an exploration stops at its first violation) and
records, per scenario, the number of the first violating schedule (or none within the budget)
and its first line. From those numbers the detection rate of every smaller budget follows: a
seed detects with budget B when some scenario's first violation is at most B. Prints one line
per session and the table of rates for budgets 40, 80, ... up to ``--schedules``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "suites/rdma/test_completion_ownership.py"
TEST = "test_invariants_hold_under_every_explored_interleaving"
SCHEDULES = re.compile(r": (\d+) schedule\(s\)")
FAILED_AT = re.compile(r"schedule (\d+) of the '(\w+)' exploration")


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def one_session(release: str, strategy: str, seed: int, schedules: int,
                scenarios: list[str]) -> dict:
    """{scenario: {"first": N or None, "ran": N, "what": first line}} of one session."""
    with tempfile.TemporaryDirectory(prefix="vs-detect-") as tmp:
        junit = Path(tmp) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_mooncake",
                SUITE, "-k", f"{TEST} and ({' or '.join(scenarios)})",
                f"--mc-target=mooncake=={release}", f"--mc-schedules={schedules}",
                f"--mc-strategy={strategy}", f"--mc-seed={seed}", "--mc-confirm=0", "-n", "0",
                "-q", f"--junitxml={junit}"]
        start = time.monotonic()
        subprocess.run(argv, cwd=ROOT, check=False, capture_output=True, timeout=7200)
        took = time.monotonic() - start
        out: dict = {"seconds": round(took)}
        for case in ET.parse(junit).iter("testcase") if junit.exists() else []:
            name = case.get("name", "")
            scenario = next((s for s in scenarios if s in name), name)
            ran = next((int(m.group(1)) for p in case.iter("property")
                        if p.get("name") == "mc_exploration"
                        and (m := SCHEDULES.search(p.get("value", "")))), None)
            failure = case.find("failure")
            text = failure.get("message", "") if failure is not None else ""
            out[scenario] = {"first": ran if failure is not None else None, "ran": ran,
                             "what": text.split("broke CO-9: ", 1)[-1][:160]}
        return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True)
    ap.add_argument("--strategies", default="mix,pct")
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--schedules", type=int, default=100)
    ap.add_argument("--scenarios",
                    default="qp_fatal_races_completion,reclaim_with_pending_completions")
    ap.add_argument("--json", type=Path, help="also write every session's numbers here")
    args = ap.parse_args(argv)
    scenarios = args.scenarios.split(",")
    results: dict = {}
    for strategy in args.strategies.split(","):
        for seed in seeds_of(args.seeds):
            got = one_session(args.release, strategy, seed, args.schedules, scenarios)
            results.setdefault(strategy, {})[seed] = got
            print(f"{strategy} seed {seed}: {got}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    print(f"\n{args.release}: detection rate (a seed detects when some scenario's first "
          f"violation is within the budget)")
    for strategy, by_seed in results.items():
        firsts = [min((v["first"] for k, v in r.items() if isinstance(v, dict)
                       and v.get("first")), default=None) for r in by_seed.values()]
        rates = [f"{b}: {sum(1 for f in firsts if f and f <= b)}/{len(firsts)}"
                 for b in range(40, args.schedules + 1, 40)]
        print(f"  {strategy:<7} first violations {firsts}; " + ", ".join(rates))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
