"""update: an expectations file written from a stored report's column (what
``--mc-expect-update`` does after a run, for a report a CI job left behind).

    python -m pytest_mooncake.report update REPORT.json -o FILE.toml [--column LABEL]
        [--expect FILE|NAME] [--profile NAME]

Starts from --expect (default: -o when it exists), keeping its reasons, issue links and
verdict sets that hold the new verdict, and writes -o. Exit status: 0 written; 2 a file cannot
be read or the column is ambiguous.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_mooncake.report.expectation_update import (
    leading_comments,
    updated_document,
    write_expectations,
)
from pytest_mooncake.report.expectations import load_expectations
from pytest_mooncake.report.report_columns import columns, pick, read_report

HELP = "write an expectations file from one column of a report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", help="the report to take verdicts from")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.toml",
                        help="the expectations file to write")
    parser.add_argument("--column", metavar="LABEL",
                        help="the column (a unique part of its label); needed for a matrix")
    parser.add_argument("--expect", metavar="FILE|NAME",
                        help="the file to start from (default: --output when it exists)")
    parser.add_argument("--profile", default="", help="the deployment profile it describes")


def run(args: argparse.Namespace) -> int:
    from pytest_mooncake.report.catalogue import load_catalogue
    from pytest_mooncake.report.command_errors import CommandError

    found = columns(read_report(args.report))
    if args.column:
        column = pick(found, args.column, args.report)
    elif len(found) == 1:
        column = next(iter(found.values()))
    else:
        raise CommandError(f"{args.report} has {len(found)} columns ({', '.join(found)}); "
                           f"name one with --column")
    output = Path(args.output)
    start = args.expect or (str(output) if output.is_file() else None)
    old = None
    if start:
        old = load_expectations(start, [Path.cwd()]).single
        if old is None:
            raise CommandError(f"{start} is a [columns] file; start from a one-target file")
    doc = updated_document(column, old, args.profile, load_catalogue().order)
    write_expectations(output, doc, leading_comments(old.path) if old else "")
    print(f"wrote {output}: {len(doc['requirements'])} requirement(s) of column "
          f"{column.label!r} ({column.version})")
    return 0
