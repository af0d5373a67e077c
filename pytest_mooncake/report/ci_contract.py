"""``--mc-fail-on``: which runs a pipeline must not take for a pass.

A run whose every test was n/a exits 0 in plain pytest, so "judged and passed" and "judged
nothing" look alike; a run whose only failures did not reproduce on a re-run (intermittent,
``confirmation_runs``) exits 0 too. A rule here names what the run must have judged; where it
did not, the session's exit status becomes ``EXIT_NOT_JUDGED`` (when it would otherwise be 0)
and the terminal and the JSON report say why. Rules (strategy objects, parsed from the option's
value):

- ``never`` (default): the exit status is pytest's own.
- ``nothing``: fail when a column (target) judged no requirement (no pass, FAIL or
  intermittent).
- ``na``: fail when any requirement is n/a in any column (and when a column judged nothing).
- ``na:ID,...``: fail when one of these requirements is n/a, or no test of it ran, in a column.
- ``intermittent``: fail when any requirement is intermittent in any cell (a column or a
  version-skew pair).
- ``RULE+RULE``: every breach of each (e.g. ``na+intermittent``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_mooncake.report.catalogue import Catalogue
from pytest_mooncake.report.conformance_matrix import ConformanceMatrix
from pytest_mooncake.report.verdict_rule import (
    VERDICT_FAIL,
    VERDICT_INTERMITTENT,
    VERDICT_NA,
    VERDICT_PASS,
)

EXIT_NOT_JUDGED = 6
"""The exit status of a run that passed pytest but broke its ``--mc-fail-on`` rule (pytest's
own codes are 0-5: 1 a test failed, 4 usage error, 5 nothing collected)."""

RULES = "never, nothing, na, na:ID,ID or intermittent (several joined with +)"


class FailOn:
    """A rule: what the run must have judged. ``problems`` lists every breach, one line each."""

    spec = "never"

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        return []


@dataclass(frozen=True)
class NothingJudged(FailOn):
    spec = "nothing"

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        out = []
        for column in matrix.columns:
            verdicts = [matrix.verdict(req, column) for req in matrix.requirement_ids(column)]
            if not any(v in (VERDICT_PASS, VERDICT_FAIL, VERDICT_INTERMITTENT) for v in verdicts):
                ran = len([v for v in verdicts if v])
                out.append(f"[{column}] judged nothing: no requirement passed or failed "
                           f"({ran} requirement(s) named, "
                           f"{sum(v == VERDICT_NA for v in verdicts)} n/a)")
        return out


@dataclass(frozen=True)
class AnyNotApplicable(FailOn):
    spec = "na"

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        out = NothingJudged().problems(matrix)
        for column in matrix.columns:
            for req in matrix.requirement_ids(column):
                if matrix.verdict(req, column) == VERDICT_NA:
                    out.append(f"[{column}] {req} n/a: {_reasons(matrix, req, column)}")
        return out


@dataclass(frozen=True)
class NamedNotApplicable(FailOn):
    requirements: tuple[str, ...]

    @property
    def spec(self) -> str:  # type: ignore[override]
        return "na:" + ",".join(self.requirements)

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        out = []
        for column in matrix.columns:
            for req in self.requirements:
                verdict = matrix.verdict(req, column)
                if verdict is None:
                    out.append(f"[{column}] {req}: no test of it ran")
                elif verdict == VERDICT_NA:
                    out.append(f"[{column}] {req} n/a: {_reasons(matrix, req, column)}")
        return out


@dataclass(frozen=True)
class AnyIntermittent(FailOn):
    spec = "intermittent"

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        out = []
        for req, key in matrix.cells():
            if matrix.verdict(req, key) == VERDICT_INTERMITTENT:
                tally = matrix.tally(req, key)
                out.append(f"[{key}] {req} intermittent: "
                           f"{tally.describe() if tally else 'seen failing and passing'}")
        return out


@dataclass(frozen=True)
class AllOf(FailOn):
    rules: tuple[FailOn, ...]

    @property
    def spec(self) -> str:  # type: ignore[override]
        return "+".join(rule.spec for rule in self.rules)

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(r for rule in self.rules for r in getattr(rule, "requirements", ()))

    def problems(self, matrix: ConformanceMatrix) -> list[str]:
        return list(dict.fromkeys(p for rule in self.rules for p in rule.problems(matrix)))


def _reasons(matrix: ConformanceMatrix, req: str, column: str) -> str:
    reasons = sorted({t.reason for t in matrix.tests(req, column) if t.reason})
    return "; ".join(reasons) or "every test was skipped"


def parse_fail_on(value: str) -> FailOn:
    """The rule ``value`` names; ``pytest.UsageError`` naming the accepted forms otherwise.
    Requirement IDs are checked against the catalogue by ``check_ids``."""
    text = value.strip()
    if "+" in text:
        try:
            rules = tuple(_one_rule(part) for part in text.split("+"))
        except pytest.UsageError:
            raise pytest.UsageError(f"--mc-fail-on must be {RULES} (got {value!r}); e.g. "
                                    f"--mc-fail-on=na+intermittent") from None
        kept = tuple(r for r in rules if r.spec != "never")
        return AllOf(kept) if kept else FailOn()
    return _one_rule(text)


def _one_rule(value: str) -> FailOn:
    text = value.strip()
    kind, sep, ids = text.partition(":")
    kind = kind.strip().lower()
    if not sep and kind in ("", "never"):
        return FailOn()
    if not sep and kind == "nothing":
        return NothingJudged()
    if not sep and kind == "na":
        return AnyNotApplicable()
    if not sep and kind == "intermittent":
        return AnyIntermittent()
    named = tuple(dict.fromkeys(x.strip().upper() for x in ids.split(",") if x.strip()))
    if sep and kind == "na" and named:
        return NamedNotApplicable(named)
    raise pytest.UsageError(f"--mc-fail-on must be {RULES} (got {value!r}); e.g. "
                            f"--mc-fail-on=na:MR-3,MR-16")


def check_ids(rule: FailOn, catalogue: Catalogue) -> None:
    """A named requirement that is not in the catalogue is a usage error."""
    unknown = [r for r in getattr(rule, "requirements", ()) if r not in catalogue]
    if unknown:
        raise pytest.UsageError(f"--mc-fail-on: unknown requirement(s) {', '.join(unknown)} "
                                f"({catalogue.suggest(unknown[0])})")
