"""agree: whether N runs of one matrix gave the same verdict in every cell.

    python -m pytest_mooncake.report agree A.json B.json [C.json ...] [--column LABEL]

A cell is one requirement of one column. Columns are paired by label across the reports
(one-column reports are paired whatever their labels; --column picks one column of each by a
unique part of its label). Every verdict counts as itself: ``intermittent`` in all runs agrees,
``intermittent`` in one and ``FAIL`` in another does not. A requirement judged in some runs
only is a disagreement (judged in k of N). Each disagreeing cell is listed with its verdict per
run (and seed), then one line: cells that agree of cells judged.

Exit status: 0 every cell agrees; 1 some cell differs; 2 fewer than two reports, or one that
cannot be read.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pytest_mooncake.report.command_errors import CommandError
from pytest_mooncake.report.report_columns import Column, columns, pick, read_report

HELP = "do N reports give the same verdict in every cell? (exit 0 yes, 1 no)"
EXIT_AGREE, EXIT_DISAGREE = 0, 1


@dataclass(frozen=True)
class Cell:
    column: str
    requirement: str
    verdicts: tuple[str | None, ...]  # per report, None: not judged there

    @property
    def agrees(self) -> bool:
        return len(set(self.verdicts)) == 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="two or more reports of runs of the same matrix")
    parser.add_argument("--column", metavar="LABEL",
                        help="compare this column of each report (a unique part of its label)")


def _aligned(runs: list[dict[str, Column]], column: str | None) -> dict[str, list[Column]]:
    if column:
        picked = [pick(cols, column, f"report {i + 1}") for i, cols in enumerate(runs)]
        return {picked[0].label: picked}
    if all(len(cols) == 1 for cols in runs):
        only = [next(iter(cols.values())) for cols in runs]
        return {only[0].label: only}
    labels = [label for label in runs[0] if all(label in cols for cols in runs)]
    return {label: [cols[label] for cols in runs] for label in labels}


def cells(runs: list[dict[str, Column]], column: str | None = None) -> list[Cell]:
    """Every (column, requirement) cell of the aligned columns, with its verdict per run."""
    out = []
    for label, cols in _aligned(runs, column).items():
        reqs = sorted({r for c in cols for r in c.requirements}, key=_req_order)
        out += [Cell(label, r, tuple(c.verdict(r) for c in cols)) for r in reqs]
    return out


def _req_order(req: str) -> tuple[str, int]:
    head, _, num = req.rpartition("-")
    return (head, int(num)) if num.isdigit() else (req, 0)


def run(args: argparse.Namespace) -> int:
    if len(args.reports) < 2:
        raise CommandError("agree needs two reports or more")
    docs = [read_report(p) for p in args.reports]
    runs = [columns(d) for d in docs]
    found = cells(runs, args.column)
    if not found:
        raise CommandError("no column is in every report (name one with --column)")
    seeds = [next(iter(r.values())).seed if r else None for r in runs]
    print(f"{len(docs)} reports, seeds {', '.join(str(s) for s in seeds)}")
    differ = [c for c in found if not c.agrees]
    for c in differ:
        per_run = ", ".join(f"{v or 'not judged'} (seed {s})" for v, s in zip(c.verdicts, seeds, strict=True))
        print(f"  differs  [{c.column}] {c.requirement}: {per_run}")
    columns_seen = sorted({c.column for c in found})
    print(f"{len(found) - len(differ)} of {len(found)} cells agree across {len(docs)} runs "
          f"({len(columns_seen)} column(s): {', '.join(columns_seen)})")
    return EXIT_DISAGREE if differ else EXIT_AGREE
