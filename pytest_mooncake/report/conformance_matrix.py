"""The conformance matrix: requirement x target -> pass / FAIL / n/a, from test outcomes.

It collects one outcome per test, requirement and column (``verdict_rule`` folds the phases
and gives the verdict) and renders the terminal table; ``json_report`` writes it as JSON.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pytest_mooncake.report.catalogue import Catalogue
from pytest_mooncake.report.not_applicable import NotApplicable
from pytest_mooncake.report.verdict_rule import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    VERDICT_ERROR,
    VERDICT_FAIL,
    VERDICT_NA,
    VERDICT_PASS,
    VERDICTS,
    fold_phase,
    verdict,
)


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str
    not_applicable: NotApplicable | None = None
    """Why a skipped test did not run (the means its target lacks)."""
    message: str | None = None
    """Why a failed or errored test did not pass (its assertion or exception message)."""
    duration: float = 0.0
    """Seconds of its setup, call and teardown together."""
    artifacts: tuple[str, ...] = ()
    """Files the test wrote for a person to look at (a chaos run's timeline and plot)."""

    @property
    def reason(self) -> str | None:
        return self.not_applicable.reason if self.not_applicable else None


@dataclass
class ConformanceMatrix:
    """Collects per-test outcomes keyed by requirement and column (target label)."""

    catalogue: Catalogue
    columns: list[str] = field(default_factory=list)
    _tests: dict[tuple[str, str], dict[str, TestOutcome]] = field(
        default_factory=lambda: defaultdict(dict)
    )

    pairs: dict[str, list[str]] = field(default_factory=dict)
    """Per column, the version-skew pairs (``mc_skew`` ids) its tests ran under (shown sorted,
    so serial and xdist runs print the same)."""

    def add_column(self, column: str) -> None:
        if column not in self.columns:
            self.columns.append(column)

    def record(self, req_ids: list[str], column: str, nodeid: str, phase: str, outcome: str,
               not_applicable: NotApplicable | None = None, message: str | None = None,
               pair: str | None = None, pair_only: bool = False,
               duration: float = 0.0, artifacts: tuple[str, ...] = ()) -> None:
        """Fold one pytest phase report (setup/call/teardown) into the test's final outcome;
        a test run under a skew ``pair`` also counts in that pair's own cell of the column
        (only there with ``pair_only``: a pair that does not involve the column's target)."""
        self.add_column(column)
        keys = [] if pair and pair_only else [column]
        if pair:
            seen = self.pairs.setdefault(column, [])
            if pair not in seen:
                seen.append(pair)
            keys.append(pair_label(column, pair))
        for req in req_ids:
            for key in keys:
                self._fold_into(self._tests[(req, key)], nodeid, phase, outcome, not_applicable,
                                message, duration, artifacts)

    @staticmethod
    def _fold_into(tests: dict[str, TestOutcome], nodeid: str, phase: str, outcome: str,
                   not_applicable: NotApplicable | None, message: str | None,
                   duration: float, artifacts: tuple[str, ...] = ()) -> None:
        prev = tests.get(nodeid)
        spent = (prev.duration if prev else 0.0) + duration
        files = tuple(dict.fromkeys([*(prev.artifacts if prev else ()), *artifacts]))
        new = fold_phase(prev.outcome or None if prev else None, phase, outcome)
        if new is None:
            if prev is not None:
                prev.duration, prev.artifacts = spent, files
            else:  # a setup that passed: the test's outcome is not known yet, its time is
                tests[nodeid] = TestOutcome(nodeid, "", duration=spent, artifacts=files)
            return
        keep_na = not_applicable if new == SKIPPED else None
        keep_message = message if new in (FAILED, ERROR) else None
        tests[nodeid] = TestOutcome(nodeid, new, keep_na, keep_message, spent, files)

    def requirement_ids(self, column: str | None = None) -> list[str]:
        return sorted({req for req, c in self._tests if column is None or c == column},
                      key=self.catalogue.order)

    def tests(self, req: str, column: str) -> list[TestOutcome]:
        return [t for t in self._tests.get((req, column), {}).values() if t.outcome]

    def verdict(self, req: str, column: str) -> str | None:
        return verdict(t.outcome for t in self.tests(req, column))

    # ------------------------------------------------------------------ rendering

    def cell(self, req: str, column: str) -> str:
        verdict = self.verdict(req, column)
        if verdict is None:
            return "-"
        tests = self.tests(req, column)
        if verdict == VERDICT_PASS:
            ran = sum(t.outcome == PASSED for t in tests)
            skipped = len(tests) - ran
            return f"pass ({ran})" + (f" +{skipped} n/a" if skipped else "")
        if verdict == VERDICT_FAIL:
            return f"FAIL ({sum(t.outcome == FAILED for t in tests)}/{len(tests)})"
        if verdict == VERDICT_ERROR:
            return f"error ({sum(t.outcome == ERROR for t in tests)}/{len(tests)})"
        reasons = {t.reason for t in tests if t.reason}
        return f"n/a ({len(reasons)} reason{'s' if len(reasons) != 1 else ''})"

    def render(self, header: list[str]) -> list[str]:
        reqs = self.requirement_ids()
        lines = list(header)
        if not reqs:
            lines.append("no collected test names a requirement (mark tests with mc_req)")
            return lines
        title_w = 60
        col_w = [max(12, len(c)) for c in self.columns]
        head = f"{'requirement':<11}  {'title':<{title_w}}  " + "  ".join(
            f"{c:<{w}}" for c, w in zip(self.columns, col_w, strict=True)
        )
        lines += [head, "-" * len(head)]
        for req in reqs:
            title = self.catalogue[req].title if req in self.catalogue else "?"
            if len(title) > title_w:
                title = title[: title_w - 3] + "..."
            cells = "  ".join(f"{self.cell(req, c):<{w}}" for c, w in zip(self.columns, col_w, strict=True))
            lines.append(f"{req:<11}  {title:<{title_w}}  {cells}")
        counts: dict[str, int] = defaultdict(int)
        for req in reqs:
            for c in self.columns:
                v = self.verdict(req, c)
                if v:
                    counts[v] += 1
        lines.append("verdicts: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v]))
        na = sorted({(req, c, t.reason) for req in reqs for c in self.columns
                     for t in self.tests(req, c)
                     if t.outcome == SKIPPED and t.reason and self.verdict(req, c) == VERDICT_NA})
        for req, c, reason in na:
            lines.append(f"  n/a {req} [{c}]: {reason}")
        return lines + self._render_pairs()

    def _render_pairs(self) -> list[str]:
        """Version-skew pairs: a row per requirement and pair, a column per target."""
        rows = sorted({(req, pair) for c in self.columns for pair in self.pairs.get(c, ())
                       for req in self.requirement_ids(pair_label(c, pair))},
                      key=lambda row: (self.catalogue.order(row[0]), row[1]))
        if not rows:
            return []
        pair_w = max(len(p) for _, p in rows)
        col_w = [max(12, len(c)) for c in self.columns]
        head = f"{'requirement':<11}  {'version-skew pair':<{pair_w}}  " + "  ".join(
            f"{c:<{w}}" for c, w in zip(self.columns, col_w, strict=True))
        lines = ["", head, "-" * len(head)]
        for req, pair in rows:
            cells = "  ".join(f"{self.cell(req, pair_label(c, pair)):<{w}}"
                              for c, w in zip(self.columns, col_w, strict=True))
            lines.append(f"{req:<11}  {pair:<{pair_w}}  {cells}")
        return lines


def pair_label(column: str, pair: str) -> str:
    """The key of a column's cell for one version-skew pair."""
    return f"{column} [{pair}]"
