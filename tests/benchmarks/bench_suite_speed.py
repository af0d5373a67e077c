"""The three speed figures of issue #24, measured as a user runs the suites, with the verdicts
they give: the reference engine's suites, the whole ``suites/`` against one real release and
the release matrix, each as one pytest session (re-runs of FAILs included, ``--mc-confirm``'s
default), its wall time beside the machine's load average.

    python tests/benchmarks/bench_suite_speed.py [--figures reference,release,matrix] [-n 2]
        [--release mooncake==0.3.13.post1] [--seed 20261202] [--out DIR] [--before DIR]
        [-- EXTRA PYTEST ARGS]

Each figure writes DIR/FIGURE.json (its ``--mc-report``) and DIR/FIGURE.log; the table goes to
DIR/speed.md and DIR/speed.json. With ``--before DIR`` each report is compared with the one of
the same figure there (``python -m pytest_mooncake.report diff``): the verdict diff column says
``empty`` when nothing changed. ``scripts/measure_speed.sh`` runs this with the defaults.

The machine may be shared: the load average (1 min, before and after) is printed beside each
wall time, and a figure is only comparable with one taken at a similar load. ``busy`` is the
first session's summed test time over its wall time (the run's less its re-runs') times the
workers: how well the workers were kept busy, which a loaded machine distorts less than the
wall time itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS_S = {"reference": 90.0, "release": 180.0, "matrix": 900.0}
"""The aims of issue #24 (wall seconds on 2 cores)."""
DEADLINE_S = 3600.0


def target_args(figure: str, release: str) -> list[str]:
    return {"reference": ["--mc-target=reference"],
            "release": [f"--mc-target={release}"],
            "matrix": ["--mc-matrix=release"]}[figure]


def load1() -> float:
    return os.getloadavg()[0]


def summary(report: Path) -> dict:
    """Tests, their summed time, the re-runs' time and the verdict counts of a report."""
    if not report.is_file():
        return {}
    doc = json.loads(report.read_text())
    tests: dict[str, float] = {}
    verdicts: dict[str, int] = {}
    columns = doc.get("columns") or {doc.get("target", ""): doc}  # one target: no columns
    for column in columns.values():
        for key, count in (column.get("summary", {}).get("verdicts") or {}).items():
            verdicts[key] = verdicts.get(key, 0) + count
        cells = [column.get("requirements", {})] + [
            p.get("requirements", {}) for p in column.get("pairs", {}).values()]
        for cell in cells:
            for entry in cell.values():
                for t in entry.get("tests", []):
                    tests[t["nodeid"]] = float(t.get("duration_s") or 0.0)
    reruns = sum(float(r.get("duration_s") or 0.0) for r in (doc.get("reruns") or {}).get(
        "runs", [])) if isinstance(doc.get("reruns"), dict) else 0.0
    return {"tests": len(tests), "test_time_s": round(sum(tests.values()), 1),
            "rerun_s": round(reruns, 1), "verdicts": verdicts}


def diff(before: Path, after: Path) -> str:
    if not before.is_file():
        return "no before report"
    out = subprocess.run([sys.executable, "-m", "pytest_mooncake.report", "diff", str(before),
                          str(after)], capture_output=True, text=True, cwd=ROOT)
    if out.returncode == 0:
        return "empty"
    changed = [line for line in out.stdout.splitlines() if line.strip()]
    return f"exit {out.returncode}: " + " | ".join(changed[:6])


def measure(figure: str, args: argparse.Namespace, extra: list[str]) -> dict:
    report = args.out / f"{figure}.json"
    log = args.out / f"{figure}.log"
    command = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "suites/", "-n",
               str(args.workers), "-p", "no:cacheprovider", "-q", f"--mc-seed={args.seed}",
               f"--mc-report={report}", *target_args(figure, args.release), *extra]
    before = load1()
    start = time.monotonic()
    with log.open("w") as out:
        try:
            status = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                    timeout=DEADLINE_S).returncode
        except subprocess.TimeoutExpired:
            status = None
    wall = time.monotonic() - start
    row = {"figure": figure, "command": " ".join(command[1:]), "wall_s": round(wall, 1),
           "aim_s": TARGETS_S[figure], "load_before": round(before, 2),
           "load_after": round(load1(), 2), "exit_status": status, **summary(report)}
    if row.get("test_time_s"):
        first = max(wall - row.get("rerun_s", 0.0), 1e-9)  # the first session's wall time
        row["busy"] = round(row["test_time_s"] / (first * args.workers), 2)
    if args.before is not None:
        row["verdict_diff"] = diff(args.before / f"{figure}.json", report)
    return row


def table(rows: list[dict], workers: int) -> str:
    lines = [f"| figure (-n {workers}) | wall s | aim s | load 1 min before/after | tests | "
             "test time s | busy | re-runs s | exit | verdict diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['figure']} | {r['wall_s']} | {r['aim_s']:g} | {r['load_before']} / "
                     f"{r['load_after']} | {r.get('tests', '-')} | {r.get('test_time_s', '-')} | "
                     f"{r.get('busy', '-')} | {r.get('rerun_s', '-')} | {r['exit_status']} | "
                     f"{r.get('verdict_diff', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", default="reference,release,matrix")
    parser.add_argument("-n", "--workers", type=int, default=2)
    parser.add_argument("--release", default="mooncake==0.3.13.post1")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--out", type=Path, default=Path("speed-run"))
    parser.add_argument("--before", type=Path, default=None,
                        help="a DIR of an earlier run: diff each figure's verdicts with it")
    args = parser.parse_args(argv)
    figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    unknown = [f for f in figures if f not in TARGETS_S]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; known: {', '.join(TARGETS_S)}")
    args.out = args.out.resolve()
    args.before = args.before.resolve() if args.before else None
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for figure in figures:
        rows.append(measure(figure, args, extra))
        print(table(rows[-1:], args.workers).splitlines()[-1], flush=True)
    text = table(rows, args.workers)
    (args.out / "speed.md").write_text(text + "\n")
    (args.out / "speed.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)
    return 0 if all(r["exit_status"] is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
