"""Expected verdicts (``--mc-expect``) and how a run's results compare with them.

A result matches when its verdict is one of the expected ones. A mismatch is one of three kinds,
in the order a pipeline cares about them:

- ``regression``: a failing verdict (FAIL, error) where none was expected, e.g. expected pass,
  got FAIL. Always fails the run.
- ``changed``: another verdict that was not expected (pass became n/a, became intermittent...).
  Fails the run.
- ``unexpected pass``: pass where it was not expected (a FAIL fixed). Reported; fails the run
  only with ``--mc-expect-strict``.

Requirements, tests and pairs the file lists but the run did not judge (``--mc-only``,
deselection) are not mismatches. Shipped files live in ``pytest_mooncake/data/expectations/``
and are found by name like run matrices (``schemas/shipped_files.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.report.report_columns import Column
from pytest_mooncake.report.verdict_rule import VERDICTS
from pytest_mooncake.schemas.expectation_file import (
    DEFAULT_EXPECTED,
    VERDICTS_CONTEXT,
    ExpectationFile,
    Expected,
)
from pytest_mooncake.schemas.shipped_files import NotShipped, find, shipped_names
from pytest_mooncake.schemas.toml_documents import SchemaError, load

KIND = "expectations"
REGRESSION, CHANGED, UNEXPECTED_PASS = "regression", "changed", "unexpected pass"
FAILING = ("FAIL", "error")
KNOWN_VERDICTS = tuple(dict.fromkeys((*VERDICTS, "intermittent")))
"""The verdict words a file may use: the verdict rule's, and ``intermittent`` (a verdict being
added: a file may expect it before this plugin gives it)."""


class ExpectationError(ValueError):
    """A file that cannot be found or read; the message says which and why."""


@dataclass(frozen=True)
class Expectation:
    verdicts: tuple[str, ...]
    reason: str = ""
    issue: str = ""

    def text(self) -> str:
        return self.verdicts[0] if len(self.verdicts) == 1 else "|".join(self.verdicts)


@dataclass(frozen=True)
class TargetExpectations:
    """What one target (one column) is expected to give."""

    path: Path
    default: Expectation
    requirements: Mapping[str, Expectation] = field(default_factory=dict)
    tests: Mapping[tuple[str, str], Expectation] = field(default_factory=dict)
    pairs: Mapping[tuple[str, str], Expectation] = field(default_factory=dict)
    target: str = ""
    profile: str = ""

    def of(self, req: str) -> Expectation:
        return self.requirements.get(req, self.default)


@dataclass(frozen=True)
class Expectations:
    """A file as given: one target's (``single``), or a matrix's per column label."""

    spec: str
    single: TargetExpectations | None = None
    by_column: Mapping[str, TargetExpectations] = field(default_factory=dict)

    def for_column(self, label: str) -> TargetExpectations | None:
        if self.single is not None:
            return self.single
        return self.by_column.get(label)

    def check_shape(self, labels: list[str]) -> None:
        """A one-target file judges a one-column run only: a matrix needs ``[columns]``."""
        if self.single is not None and len(labels) > 1:
            raise ExpectationError(
                f"--mc-expect={self.spec}: a one-target expectations file cannot judge "
                f"{len(labels)} columns ({', '.join(labels)}); give a file with a [columns] "
                f"table mapping each column label to its expectations")

    def check_covers(self, labels: list[str], bases: list[Path] | tuple[Path, ...] = ()) -> None:
        """A ``[columns]`` file must list every column of the run: a column it does not list is
        judged against nothing (its FAILs are re-run and fail the gate) and never updated by
        ``--mc-expect-update``, which is a wrong file, not a finding. The message names the
        shipped files that do list them all."""
        if self.single is not None:
            return
        missing = [label for label in labels if label not in self.by_column]
        if not missing:
            return
        fitting = []
        for name in shipped_names(KIND):
            try:
                doc = _load(locate(name, bases))
            except ExpectationError:
                continue
            if doc.columns and all(label in doc.columns for label in labels):
                fitting.append(name)
        hint = (f"; the shipped file(s) listing every column of this run: "
                f"{', '.join(f'--mc-expect={n}' for n in fitting)}" if fitting else
                "; add each to its [columns] table, naming a one-target file")
        raise ExpectationError(
            f"--mc-expect={self.spec} has no expectations for column(s) "
            f"{', '.join(missing)} (its [columns] lists {', '.join(self.by_column) or 'none'})"
            + hint)

    def files(self) -> list[TargetExpectations]:
        return [self.single] if self.single else list(self.by_column.values())


@dataclass(frozen=True)
class Mismatch:
    kind: str
    column: str
    requirement: str
    expected: Expectation
    got: str
    test: str | None = None
    pair: str | None = None

    def where(self) -> str:
        inner = f" {self.test}" if self.test else (f" [pair {self.pair}]" if self.pair else "")
        return f"[{self.column}] {self.requirement}{inner}"

    def line(self) -> str:
        out = f"{self.kind}: {self.where()}: expected {self.expected.text()}, got {self.got}"
        notes = [x for x in (self.expected.reason, self.expected.issue) if x]
        return out + (f" ({'; '.join(notes)})" if notes else "")


# ----------------------------------------------------------------------------- reading


def locate(spec: str, bases: list[Path] | tuple[Path, ...]) -> Path:
    try:
        return find(KIND, spec, bases)
    except NotShipped as exc:
        raise ExpectationError(f"--mc-expect={spec}: no such file ({exc})") from None


def load_expectations(spec: str, bases: list[Path] | tuple[Path, ...] = ()) -> Expectations:
    """``spec`` (a path or a shipped/project name) read; a matrix file's columns read too."""
    path = locate(spec, bases)
    doc = _load(path)
    if not doc.columns:
        return Expectations(spec, single=_target(path, doc))
    by_column = {}
    for label, name in doc.columns.items():
        column_path = locate(name, [path.parent, *bases])
        column_doc = _load(column_path)
        if column_doc.columns:
            raise ExpectationError(f"{path}: column {label!r} names {column_path}, itself a "
                                   f"[columns] file; name a one-target file")
        by_column[label] = _target(column_path, column_doc)
    return Expectations(spec, by_column=by_column)


def _load(path: Path) -> ExpectationFile:
    try:
        return load(ExpectationFile, path, {VERDICTS_CONTEXT: KNOWN_VERDICTS})
    except SchemaError as exc:
        raise ExpectationError(str(exc)) from None


def _expectation(entry: Expected) -> Expectation:
    return Expectation(tuple(entry.verdict), entry.reason, entry.issue)


def _target(path: Path, doc: ExpectationFile) -> TargetExpectations:
    reqs, tests, pairs = {}, {}, {}
    for req, entry in doc.requirements.items():
        reqs[req] = _expectation(entry)
        tests.update({(req, t): _expectation(e) for t, e in entry.tests.items()})
        pairs.update({(req, p): _expectation(e) for p, e in entry.pairs.items()})
    return TargetExpectations(path, Expectation(tuple(doc.default or DEFAULT_EXPECTED)), reqs,
                              tests, pairs, doc.target, doc.profile)


def check_catalogue(expectations: Expectations, known: Any) -> None:
    """A requirement ID the catalogue does not know is a typo, not an expectation."""
    for target in expectations.files():
        unknown = [r for r in target.requirements if r not in known]
        if unknown:
            raise ExpectationError(f"{target.path}: unknown requirement(s) {', '.join(unknown)} "
                                   f"({known.suggest(unknown[0])})")


# ----------------------------------------------------------------------------- comparing


def classify(expected: Expectation, got: str) -> str | None:
    """The kind of mismatch of ``got`` against ``expected``; None when it matches."""
    if got in expected.verdicts:
        return None
    if got in FAILING and not any(v in FAILING for v in expected.verdicts):
        return REGRESSION
    if got == "pass":
        return UNEXPECTED_PASS
    return CHANGED


def compare(column: Column, expected: TargetExpectations) -> list[Mismatch]:
    """Every mismatch of one column: requirements, then listed tests, then listed pairs."""
    out = []
    for req, entry in column.requirements.items():
        want = expected.of(req)
        kind = classify(want, entry["verdict"])
        if kind:
            out.append(Mismatch(kind, column.label, req, want, entry["verdict"]))
    for (req, nodeid), got in column.test_verdicts().items():
        want = expected.tests.get((req, nodeid))
        kind = want and classify(want, got)
        if kind:
            out.append(Mismatch(kind, column.label, req, want, got, test=nodeid))
    for (req, pair), got in column.pair_verdicts().items():
        want = expected.pairs.get((req, pair))
        kind = want and classify(want, got)
        if kind:
            out.append(Mismatch(kind, column.label, req, want, got, pair=pair))
    return out


@dataclass
class Judgement:
    """A run's results against its expectations."""

    mismatches: list[Mismatch] = field(default_factory=list)
    matched: int = 0
    unchecked_columns: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Mismatch]:
        return [m for m in self.mismatches if m.kind == kind]

    def failing(self, strict: bool) -> list[Mismatch]:
        """The mismatches that fail the run: regressions and changes; unexpected passes too
        when ``strict``."""
        return [m for m in self.mismatches if strict or m.kind != UNEXPECTED_PASS]

    def lines(self, strict: bool) -> list[str]:
        """Regressions first, then changes, then unexpected passes, then a one-line tally."""
        out = [m.line() for kind in (REGRESSION, CHANGED, UNEXPECTED_PASS)
               for m in self.of_kind(kind)]
        out += [f"no expectations for column {c!r} (not checked)" for c in self.unchecked_columns]
        counts = ", ".join(f"{len(self.of_kind(k))} {k}"
                           for k in (REGRESSION, CHANGED, UNEXPECTED_PASS))
        fails = len(self.failing(strict))
        out.append(f"{self.matched} result(s) as expected; {counts}"
                   + (f" -> {fails} fail the run" + (" (--mc-expect-strict)" if strict else "")
                      if fails else ""))
        return out

    def as_json(self, spec: str, strict: bool) -> dict[str, Any]:
        return {"file": spec, "strict": strict, "matched": self.matched,
                "unchecked_columns": list(self.unchecked_columns),
                "mismatches": [{"kind": m.kind, "column": m.column, "requirement": m.requirement,
                                **({"test": m.test} if m.test else {}),
                                **({"pair": m.pair} if m.pair else {}),
                                "expected": list(m.expected.verdicts), "got": m.got,
                                **({"reason": m.expected.reason} if m.expected.reason else {}),
                                **({"issue": m.expected.issue} if m.expected.issue else {})}
                               for m in self.mismatches]}


def judge(found: Mapping[str, Column], expectations: Expectations) -> Judgement:
    out = Judgement()
    for label, column in found.items():
        target = expectations.for_column(label)
        if target is None:
            out.unchecked_columns.append(label)
            continue
        mismatches = compare(column, target)
        out.mismatches += mismatches
        judged = (len(column.requirements)
                  + sum(1 for k in column.test_verdicts() if k in target.tests)
                  + sum(1 for k in column.pair_verdicts() if k in target.pairs))
        out.matched += judged - len(mismatches)
    return out
