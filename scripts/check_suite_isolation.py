#!/usr/bin/env python3
"""Check that every conformance suite file stands on its own and gives the same verdicts twice.

Runs ``suites/`` once as a whole, then each suite file alone, twice in a row, all over the same
matrix (default ``reference-profiles``: rfc and legacy in one session) with one seed, and
compares the outcome of every test: alone vs. alone again (repeatability) and alone vs. the whole
run (no hidden order dependence). Prints a table, one row per file, and exits 1 on any
difference, naming the test and the outcomes seen.

    python scripts/check_suite_isolation.py                       # ~7 min on 2 cores
    python scripts/check_suite_isolation.py --matrix reference-profiles --seed 7 -n 2
    python scripts/check_suite_isolation.py suites/metadata/test_cache.py
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_DEADLINE = 900
PYTEST_OK = (0, 1)
"""pytest exit statuses after which the report is a judgement (1: some test failed)."""


def outcomes(report: dict) -> dict[str, str]:
    """nodeid -> outcome over every column of a report (a single-target report has one)."""
    columns = report.get("columns") or {report["target"]: report}
    return {t["nodeid"]: t["outcome"]
            for column in columns.values()
            for req in column["requirements"].values()
            for t in req["tests"]}


def run(paths: list[str], matrix: str, seed: int, workers: int, workdir: Path) -> tuple[dict[str, str], float]:
    report = workdir / f"report-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "-p", "no:cacheprovider", "-q",
            *paths, f"--mc-matrix={matrix}", f"--mc-seed={seed}", f"--mc-report={report}"]
    if workers > 1:
        argv += ["-n", str(workers)]
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_DEADLINE)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"no end within {RUN_DEADLINE}s (a hang): {' '.join(argv)}") from None
    if proc.returncode not in PYTEST_OK or not report.exists():
        raise SystemExit(f"pytest exited {proc.returncode} without a judgement: {' '.join(argv)}\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return outcomes(json.loads(report.read_text())), time.monotonic() - start


def differences(label: str, left: dict[str, str], right: dict[str, str], nodeids: set[str]) -> list[str]:
    return [f"{n}: {label} {left.get(n, 'absent')} vs {right.get(n, 'absent')}"
            for n in sorted(nodeids) if left.get(n) != right.get(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="suite files (default: every suites/**/test_*.py)")
    parser.add_argument("--matrix", default="reference-profiles", help="--mc-matrix of every run")
    parser.add_argument("--seed", type=int, default=None, help="--mc-seed of every run (default random, printed)")
    parser.add_argument("-n", "--workers", type=int, default=2, help="xdist workers per run (default 2)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "suites").rglob("test_*.py"))
    print(f"matrix={args.matrix} seed={seed} (rerun with --seed {seed}) files={len(files)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="suite-isolation-") as tmp:
        whole, took = run(["suites/"], args.matrix, seed, args.workers, Path(tmp))
        print(f"whole run: {len(whole)} test outcomes in {took:.0f}s", flush=True)
        rows, problems = [], []
        for path in files:
            first, t1 = run([path], args.matrix, seed, args.workers, Path(tmp))
            second, t2 = run([path], args.matrix, seed, args.workers, Path(tmp))
            mine = set(first) | set(second)
            found = (differences("alone twice:", first, second, mine)
                     + differences("alone vs whole:", first, whole, mine))
            problems += [f"{path}: {d}" for d in found]
            failed = sum(o == "failed" for o in first.values())
            rows.append((path, len(mine), failed, t1, t2, "same" if not found else f"{len(found)} differ"))
            print(f"  {path}: {rows[-1][-1]}", flush=True)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'suite file':<{width}}  tests  failed  run 1 s  run 2 s  verdicts")
    for path, n, failed, t1, t2, verdict in rows:
        print(f"{path:<{width}}  {n:>5}  {failed:>6}  {t1:>7.0f}  {t2:>7.0f}  {verdict}")
    if problems:
        print("\n" + "\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
