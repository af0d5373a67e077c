"""diff: what changed between two reports, per requirement, per test and per skew pair.

    python -m pytest_mooncake.report diff OLD.json NEW.json [--column OLD[,NEW]] [--format text|markdown]

Columns are paired by label; two one-column reports are paired whatever their labels; --column
LABEL compares that column of both, --column OLD,NEW two columns (of one report or two: a
unique part of a label is enough, e.g. --column 0.3.13,0.3.14). Tests are compared without the
column in their id. A change reads: newly FAIL, newly error, newly pass, became n/a, became
intermittent (any verdict: "became X"), newly judged, no longer judged.

Exit status: 0 no difference; 1 something got worse (a verdict newly FAIL or error, or a pass
that is no longer a pass); 3 differences, none worse (fixes, new requirements, n/a moves);
2 a usage error or a report that cannot be read.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pytest_mooncake.report.report_columns import Column, columns, pick, read_report

HELP = "what changed between two reports (exit 0 same, 1 worse, 3 changed, not worse)"
EXIT_SAME, EXIT_WORSE, EXIT_CHANGED = 0, 1, 3
FAILING = ("FAIL", "error")


@dataclass(frozen=True)
class Change:
    requirement: str
    old: str | None
    new: str | None
    test: str | None = None
    pair: str | None = None

    @property
    def what(self) -> str:
        if self.old is None:
            return "newly judged"
        if self.new is None:
            return "no longer judged"
        if self.new in ("FAIL", "error", "pass"):
            return f"newly {self.new}"
        return f"became {self.new}"

    @property
    def worse(self) -> bool:
        if self.old is None or self.new is None:
            return False
        return (self.new in FAILING and self.old not in FAILING) or (
            self.old == "pass" and self.new != "pass")

    @property
    def level(self) -> str:
        return "test" if self.test else ("pair" if self.pair else "requirement")

    @property
    def subject(self) -> str:
        return self.test or (f"[pair {self.pair}]" if self.pair else "")


@dataclass(frozen=True)
class ColumnDiff:
    old: Column
    new: Column
    changes: list[Change]


def _changes(old: dict, new: dict, make) -> list[Change]:
    return [make(key, old.get(key), new.get(key)) for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]


def diff_columns(old: Column, new: Column) -> ColumnDiff:
    reqs = _changes({r: old.verdict(r) for r in old.requirements},
                    {r: new.verdict(r) for r in new.requirements},
                    lambda r, a, b: Change(r, a, b))
    tests = _changes(old.test_verdicts(), new.test_verdicts(),
                     lambda k, a, b: Change(k[0], a, b, test=k[1]))
    pairs = _changes(old.pair_verdicts(), new.pair_verdicts(),
                     lambda k, a, b: Change(k[0], a, b, pair=k[1]))
    return ColumnDiff(old, new, reqs + pairs + tests)


def paired(old_doc: dict, new_doc: dict, specs: list[str]) -> tuple[list[tuple[Column, Column]],
                                                                     list[str]]:
    """The column pairs to compare, and lines for columns only one report has."""
    old_cols, new_cols = columns(old_doc), columns(new_doc)
    if specs:
        out = []
        for spec in specs:
            a, eq, b = spec.partition(",")
            out.append((pick(old_cols, a, "OLD"), pick(new_cols, b if eq else a, "NEW")))
        return out, []
    if len(old_cols) == 1 and len(new_cols) == 1:
        return [(next(iter(old_cols.values())), next(iter(new_cols.values())))], []
    common = [label for label in old_cols if label in new_cols]
    only = [f"column {label!r} only in OLD" for label in old_cols if label not in new_cols]
    only += [f"column {label!r} only in NEW" for label in new_cols if label not in old_cols]
    return [(old_cols[label], new_cols[label]) for label in common], only


def _title(d: ColumnDiff) -> str:
    if d.old.label == d.new.label and d.old.version == d.new.version:
        return f"{d.old.label} ({d.old.version})"
    return f"{d.old.label} ({d.old.version}) -> {d.new.label} ({d.new.version})"


def _tally(diffs: list[ColumnDiff]) -> str:
    counts: dict[str, int] = {}
    for d in diffs:
        for c in d.changes:
            counts[c.what] = counts.get(c.what, 0) + 1
    total = sum(counts.values())
    if not total:
        return "no differences"
    worse = sum(c.worse for d in diffs for c in d.changes)
    return (f"{total} difference(s): " + ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))
            + f"; {worse} worse")


def render_text(diffs: list[ColumnDiff], extra: list[str]) -> list[str]:
    out = []
    for d in diffs:
        out.append(f"{_title(d)}: {len(d.changes)} difference(s)")
        for c in d.changes:
            mark = "!" if c.worse else " "
            out.append(f" {mark} {c.requirement:<7} {c.subject}{' ' if c.subject else ''}"
                       f"{c.old or '-'} -> {c.new or '-'}  ({c.what})")
    out += extra
    out.append(_tally(diffs))
    return out


def render_markdown(diffs: list[ColumnDiff], extra: list[str]) -> list[str]:
    out = ["## Conformance diff", "", _tally(diffs), ""]
    for d in diffs:
        out += [f"### {_title(d)}", ""]
        if not d.changes:
            out += ["No differences.", ""]
            continue
        out += ["| | requirement | test or skew pair | old | new | change |",
                "|---|---|---|---|---|---|"]
        for c in d.changes:
            subject = f"`{c.test}`" if c.test else (f"pair `{c.pair}`" if c.pair else "")
            out.append(f"| {':x:' if c.worse else ''} | {c.requirement} | {subject} | "
                       f"{c.old or '-'} | {c.new or '-'} | {c.what} |")
        out.append("")
    out += [f"- {line}" for line in extra]
    return out


def exit_status(diffs: list[ColumnDiff], extra: list[str]) -> int:
    if any(c.worse for d in diffs for c in d.changes):
        return EXIT_WORSE
    if extra or any(d.changes for d in diffs):
        return EXIT_CHANGED
    return EXIT_SAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD.json", help="the report to compare from")
    parser.add_argument("new", metavar="NEW.json", help="the report to compare to")
    parser.add_argument("--column", action="append", default=[], metavar="OLD[,NEW]",
                        help="compare this column (or OLD's column with NEW's); repeatable")
    parser.add_argument("--format", choices=("text", "markdown"), default="text",
                        help="text (default) or markdown (a table per column, for a PR comment)")


def run(args: argparse.Namespace) -> int:
    pairs, extra = paired(read_report(args.old), read_report(args.new), args.column)
    diffs = [diff_columns(a, b) for a, b in pairs]
    render = render_markdown if args.format == "markdown" else render_text
    print("\n".join(render(diffs, extra)))
    return exit_status(diffs, extra)
