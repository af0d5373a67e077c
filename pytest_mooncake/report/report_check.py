"""check: a stored report judged against an expectations file, as ``--mc-expect`` judges a run.

    python -m pytest_mooncake.report check REPORT.json --expect FILE|NAME [--strict]

For a merged matrix (``report merge``) give a ``[columns]`` file. Prints the mismatches,
regressions first. Exit status: 0 every result as expected; 1 a regression or another change
(an unexpected pass too with --strict), or a failing verdict in a column without expectations;
2 a file cannot be read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_mooncake.report.expectations import (
    FAILING,
    check_catalogue,
    judge,
    load_expectations,
)
from pytest_mooncake.report.report_columns import columns, read_report

HELP = "judge a report against an expectations file (exit 0 as expected, 1 not)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", help="the report to judge")
    parser.add_argument("--expect", required=True, metavar="FILE|NAME",
                        help="an expectations file, or the name of a shipped one or of "
                             "./fixtures/expectations/NAME.toml")
    parser.add_argument("--strict", action="store_true", help="an unexpected pass fails too")


def run(args: argparse.Namespace) -> int:
    from pytest_mooncake.report.catalogue import load_catalogue

    found = columns(read_report(args.report))
    expectations = load_expectations(args.expect, [Path.cwd()])
    check_catalogue(expectations, load_catalogue())
    expectations.check_shape(list(found))
    judgement = judge(found, expectations)
    print("\n".join(judgement.lines(args.strict)))
    uncovered = [c for c in judgement.unchecked_columns
                 if any(e["verdict"] in FAILING for e in found[c].requirements.values())]
    return 1 if judgement.failing(args.strict) or uncovered else 0
