"""Run a matrix several times with different seeds, one column per pytest session, and say
whether the runs agree cell by cell (issue #23's proof: "the release matrix run three times
with different seeds gives the same verdict in every cell").

    python scripts/stability_runs.py --out fixtures/reports/stability/releases \\
        --matrix releases --seeds 1101,2202,3303 [--columns LABEL,...] [--stop-after MIN] \\
        [--paths suites/] [-- PYTEST_ARGS...]

Why one column per session: a column's run is what a CI job per release makes
(docs/ci.md), ``report merge`` assembles them into one matrix report per seed, and a run can
stop between columns (a session's end, Ctrl-C) without losing the columns already judged:
the script is resumable, it skips every (column, seed) whose report is in ``--out``.

Each run is recorded in ``OUT/runs.tsv`` with its exit status, wall time, 1-minute load
before and after, the commit and a fingerprint of the code that decides verdicts (the git
trees of ``suites/``, ``pytest_mooncake/`` and ``reference_engine/``). Runs of one directory
must share the fingerprint: a run on other code is refused, naming both, since "three runs
agree" means three runs of the same code. Once every seed of a column is judged,
``report agree`` compares them; once every column is, ``report merge`` writes
``OUT/matrix-seedS.json`` per seed and ``report agree`` compares the matrices.

Each complete column's and the matrices' failure messages are also read for harness symptoms
(``report failures --harness``, docs/verdict-stability.md): a failure our harness caused is no
verdict of the build's.

Exit status: 0 every column judged under every seed, every cell agrees and no failure message
shows a harness symptom; 1 some cell differs or some message does; 2 usage error or refused fingerprint; 3 stopped before every run was made
(``--stop-after``, Ctrl-C, a run that wrote no report).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_mooncake.config.run_matrices import load_matrix  # noqa: E402
from pytest_mooncake.report.report_agreement import cells  # noqa: E402
from pytest_mooncake.report.report_columns import columns, read_report  # noqa: E402
from pytest_mooncake.runtime.die_with_parent import wrap  # noqa: E402

VERDICT_PATHS = ("suites", "pytest_mooncake", "reference_engine")
RUNS = "runs.tsv"
HEADER = "column\tseed\texit\twall_s\tstarted_utc\tload_before\tload_after\tcommit\tfingerprint\n"
EXIT_AGREE, EXIT_DIFFER, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


class Refused(Exception):
    """Bad input or a directory of other code's runs: said in one line, exit 2."""


def safe(label: str) -> str:
    """A file name for a column label: mooncake-cuda13==0.3.14@defaults -> ..._0.3.14_defaults."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", label).strip("_")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def fingerprint(allow_uncommitted: bool = False) -> tuple[str, str]:
    """(commit, fingerprint of the verdict paths' trees); refuses uncommitted changes there
    unless allowed, and then the fingerprint covers the diff too (``+`` and its hash)."""
    dirty = git("status", "--porcelain", "--", *VERDICT_PATHS)
    if dirty and not allow_uncommitted:
        raise Refused(f"uncommitted changes in the code that decides verdicts; commit or stash "
                      f"them first (or --allow-uncommitted):\n{dirty}")
    trees = " ".join(git("rev-parse", f"HEAD:{p}") for p in VERDICT_PATHS)
    print_ = hashlib.sha1(trees.encode()).hexdigest()[:12]
    if dirty:
        diff = git("diff", "HEAD", "--", *VERDICT_PATHS) + dirty
        print_ += "+" + hashlib.sha1(diff.encode()).hexdigest()[:8]
    return git("rev-parse", "--short", "HEAD"), print_


def recorded(out: Path) -> list[dict[str, str]]:
    path = out / RUNS
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    keys = lines[0].split("\t")
    return [dict(zip(keys, line.split("\t"), strict=True)) for line in lines[1:] if line]


def record(out: Path, row: dict[str, str]) -> None:
    path = out / RUNS
    if not path.exists():
        path.write_text(HEADER)
    keys = HEADER.rstrip("\n").split("\t")
    with path.open("a") as f:
        f.write("\t".join(str(row[k]) for k in keys) + "\n")


def load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def report_of(out: Path, column: str, seed: int) -> Path:
    return out / f"{safe(column)}-seed{seed}.json"


def readable(path: Path) -> bool:
    """A report a finished session wrote (a one-target or matrix report with a column)."""
    if not path.exists():
        return False
    try:
        return bool(columns(read_report(path)))
    except Exception:  # noqa: BLE001 - any unreadable report is one to make again
        return False


def summary(path: Path) -> str:
    """The verdict counts of the report's column, e.g. ``18 pass, 20 FAIL, 1 n/a``."""
    counts: dict[str, int] = {}
    for column in columns(read_report(path)).values():
        for req in column.requirements:
            verdict = column.verdict(req) or "not judged"
            counts[verdict] = counts.get(verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def run_one(column: str, seed: int, report: Path, paths: list[str], extra: list[str],
            deadline_s: float, log: Path) -> tuple[int, float]:
    """One pytest session judging ``column`` with ``seed``; (exit status, wall s). The session
    runs in its own process group, killed on Ctrl-C or when ``deadline_s`` passes."""
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", *paths, "-p",
           "no:cacheprovider", f"--mc-target={column}", f"--mc-seed={seed}",
           f"--mc-report={report}", *extra]
    started = time.monotonic()
    with log.open("w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        # through die_with_parent: a SIGKILLed script takes its session (and so its processes)
        # with it
        proc = subprocess.Popen(wrap(cmd), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            status = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            status = -1
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
    return status, time.monotonic() - started


def agreement(reports: list[Path]) -> tuple[int, int]:
    """(cells agreeing, cells judged) across the one-column reports of one column."""
    runs = [columns(read_report(p)) for p in reports]
    found = cells(runs)
    return sum(c.agrees for c in found), len(found)


def table(out: Path, column_order: list[str], seeds: list[int]) -> str:
    """The runs made in ``out`` as a Markdown table, one row per column with a report."""
    rows = {(r["column"], int(r["seed"])): r for r in recorded(out)}
    lines = ["| column | seeds | wall s per run | load before/after | verdicts per seed | "
             "cells agreeing |", "|---|---|---|---|---|---|"]
    for column in column_order:
        made = [s for s in seeds if readable(report_of(out, column, s))]
        if not made:
            continue
        runs = [rows.get((column, s), {}) for s in made]
        walls = ", ".join(r.get("wall_s", "?") for r in runs)
        loads = ", ".join(f"{r.get('load_before', '?')}/{r.get('load_after', '?')}" for r in runs)
        verdicts = "; ".join(summary(report_of(out, column, s)) for s in made)
        agree = "-"
        if len(made) > 1:
            k, n = agreement([report_of(out, column, s) for s in made])
            agree = f"{k} of {n}"
        lines.append(f"| `{column}` | {', '.join(map(str, made))} | {walls} | {loads} | "
                     f"{verdicts} | {agree} |")
    return "\n".join(lines)


def report_cli(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "pytest_mooncake.report", *args],
                          cwd=ROOT).returncode


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="directory of the reports and runs.tsv")
    p.add_argument("--matrix", default="releases",
                   help="the matrix whose columns are judged (a shipped name or a file; "
                        "default releases)")
    p.add_argument("--columns", help="comma-separated column labels, in the order to judge "
                                     "them (default: the matrix's, in its order)")
    p.add_argument("--seeds", required=True,
                   help="comma-separated seeds, one run of every column each (two or more)")
    p.add_argument("--paths", default="suites/", help="what pytest runs (default suites/)")
    p.add_argument("--stop-after", type=float, default=None, metavar="MIN",
                   help="start no new run after MIN minutes (the runs made are kept)")
    p.add_argument("--run-deadline", type=float, default=60.0, metavar="MIN",
                   help="kill a run that takes longer than this (default 60 min)")
    p.add_argument("--seed-first", action="store_true",
                   help="judge every column with the first seed before any with the next (a "
                        "first look at every column, e.g. for harness symptoms); default: "
                        "every seed of a column before the next column")
    p.add_argument("--table", action="store_true",
                   help="judge nothing: print the Markdown table of the runs made in --out "
                        "(per column: seeds, wall s, load, verdicts per seed, cells agreeing)")
    p.add_argument("--allow-uncommitted", action="store_true",
                   help="run on uncommitted changes to suites/, pytest_mooncake/ or "
                        "reference_engine/ (the fingerprint then covers the diff)")
    args = p.parse_args(argv)
    return args, extra or ["-n", "2"]


def plan(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise Refused(f"--seeds={args.seeds}: give comma-separated integers") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise Refused(f"--seeds={args.seeds}: give two or more different seeds")
    matrix = [c.target for c in load_matrix(args.matrix, ROOT)]
    if any(c.metadata or c.ha for c in load_matrix(args.matrix, ROOT)):
        raise Refused(f"--matrix={args.matrix} has columns on their own backends; this script "
                      f"runs one --mc-target per session and does not pass them")
    if not args.columns:
        return matrix, seeds
    wanted = [c.strip() for c in args.columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in matrix]
    if unknown:
        raise Refused(f"--columns: {unknown} not in matrix {args.matrix} (its columns: "
                      f"{', '.join(matrix)})")
    return wanted, seeds


def interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, interrupted)  # stopped like Ctrl-C: the run's session first
    args, extra = parse(argv)
    try:
        order, seeds = plan(args)
        if args.table:
            print(table(args.out, order, seeds))
            return EXIT_AGREE
        commit, print_ = fingerprint(args.allow_uncommitted)
        args.out.mkdir(parents=True, exist_ok=True)
        other = {r["fingerprint"] for r in recorded(args.out)} - {print_}
        if other:
            raise Refused(f"{args.out} holds runs of other code (fingerprint {sorted(other)}, "
                          f"this checkout {print_} at {commit}); use another --out or check out "
                          f"the commit of its runs.tsv")
    except Refused as exc:
        print(f"stability_runs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    pairs = ([(c, s) for s in seeds for c in order] if args.seed_first
             else [(c, s) for c in order for s in seeds])
    todo = [(c, s) for c, s in pairs if not readable(report_of(args.out, c, s))]
    total = len(order) * len(seeds)
    print(f"stability runs of {len(order)} column(s) x seeds {seeds} at {commit} "
          f"(verdict code {print_}): {total - len(todo)} of {total} already judged in {args.out}",
          flush=True)
    began = time.monotonic()
    stopped = False
    for n, (column, seed) in enumerate(todo, 1):
        if args.stop_after is not None and time.monotonic() - began > args.stop_after * 60:
            print(f"--stop-after {args.stop_after:g} min reached: {len(todo) - n + 1} run(s) "
                  f"left for the next call", flush=True)
            stopped = True
            break
        report = report_of(args.out, column, seed)
        log = report.with_suffix(".log")
        before, started = load1(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"[{n}/{len(todo)}] {column} seed {seed}: started {started} (load {before})",
              flush=True)
        try:
            status, wall = run_one(column, seed, report, args.paths.split(), extra,
                                   args.run_deadline * 60, log)
        except KeyboardInterrupt:
            report.unlink(missing_ok=True)
            print("interrupted: the run in progress is dropped, the others are kept",
                  flush=True)
            return EXIT_INCOMPLETE
        if not readable(report):
            report.unlink(missing_ok=True)
            print(f"    exit {status} after {wall:.0f} s and no report: see {log}", flush=True)
            stopped = True
            continue
        record(args.out, {"column": column, "seed": seed, "exit": status,
                          "wall_s": f"{wall:.0f}", "started_utc": started,
                          "load_before": before, "load_after": load1(), "commit": commit,
                          "fingerprint": print_})
        print(f"    exit {status} in {wall:.0f} s: {summary(report)}", flush=True)
        if all(readable(report_of(args.out, column, s)) for s in seeds):
            made = [str(report_of(args.out, column, s)) for s in seeds]
            report_cli("agree", *made)
            report_cli("failures", "--harness", *made)
    missing = [(c, s) for c in order for s in seeds if not readable(report_of(args.out, c, s))]
    if missing or stopped:
        print(f"{len(missing)} of {total} run(s) still to make", flush=True)
        return EXIT_INCOMPLETE
    matrices = []
    for seed in seeds:
        merged = args.out / f"matrix-seed{seed}.json"
        if report_cli("merge", *[str(report_of(args.out, c, seed)) for c in order],
                      "-o", str(merged), "--matrix", args.matrix) != 0:
            return EXIT_USAGE
        matrices.append(str(merged))
    agree = report_cli("agree", *matrices) == 0
    # a cell whose failure message shows our harness is no verdict of the build's
    harness_free = report_cli("failures", "--harness", *matrices) == 0
    return EXIT_AGREE if agree and harness_free else EXIT_DIFFER


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
