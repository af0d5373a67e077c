"""failures: every failure message of stored reports, each read as the build's or the harness's.

    python -m pytest_mooncake.report failures REPORT.json [REPORT.json ...] [--harness] [--format text|markdown]

Lists each distinct failure message (first line, de-duplicated per report, column and
requirement; every re-run counted) and whether it shows a harness symptom
(``failure_vocabulary.SYMPTOMS``: a settle deadline, a wait of ours timing out unread, our
handle refusing a call, an assert without words, an exception of test code) or speaks of the
build. --harness lists only the harness ones, with each symptom's cause and fix.

Exit status: 0 no message shows a harness symptom; 1 some do; 2 a report cannot be read.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from pytest_mooncake.report.failure_vocabulary import SYMPTOMS, Failure, failures
from pytest_mooncake.report.report_columns import read_report

HELP = "list every failure message of reports, harness symptoms marked (exit 1 if any)"
EXIT_CLEAN, EXIT_HARNESS = 0, 1
WIDTH = 160


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="--mc-report files (one-target or matrix, schema 1 or 2)")
    parser.add_argument("--harness", action="store_true",
                        help="only the messages that show a harness symptom")
    parser.add_argument("--format", choices=("text", "markdown"), default="text",
                        help="text lines (default) or a markdown table")


def collect(paths: list[str]) -> Counter[tuple[str, Failure]]:
    """(report name, failure with its first line as message) -> how many runs showed it."""
    out: Counter[tuple[str, Failure]] = Counter()
    for path in paths:
        name = Path(path).name
        for f in failures(read_report(path)):
            out[(name, Failure(f.column, f.requirement, f.nodeid.split("[")[0], f.outcome,
                               None, f.first_line))] += 1
    return out


def _text(rows: Counter[tuple[str, Failure]]) -> list[str]:
    lines = []
    for (report, f), n in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1].column,
                                                                kv[0][1].requirement)):
        kind = f.symptom.name if f.symptom else "build"
        lines.append(f"{kind:20} {report} [{f.column}] {f.requirement} x{n}: "
                     f"{f.message[:WIDTH]}")
    return lines


def _markdown(rows: Counter[tuple[str, Failure]]) -> list[str]:
    lines = ["| symptom | report | column | requirement | runs | message |",
             "|---|---|---|---|---|---|"]
    for (report, f), n in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1].column,
                                                                kv[0][1].requirement)):
        kind = f.symptom.name if f.symptom else "build"
        msg = f.message[:WIDTH].replace("|", "\\|")
        lines.append(f"| {kind} | {report} | {f.column} | {f.requirement} | {n} | `{msg}` |")
    return lines


def run(args: argparse.Namespace) -> int:
    rows = collect(args.reports)
    harness = Counter({k: n for k, n in rows.items() if k[1].symptom})
    shown = harness if args.harness else rows
    print("\n".join((_markdown if args.format == "markdown" else _text)(shown)))
    by_kind = Counter(k[1].symptom.name for k in harness.elements())
    total = sum(rows.values())
    print(f"\n{total} failed run(s), {sum(harness.values())} showing a harness symptom"
          + (": " + ", ".join(f"{name} {n}" for name, n in sorted(by_kind.items()))
             if by_kind else ""))
    if args.harness:
        for s in SYMPTOMS:
            if s.name in by_kind:
                print(f"  {s.name}: {s.cause}; fix: {s.fix}")
    return EXIT_HARNESS if harness else EXIT_CLEAN
