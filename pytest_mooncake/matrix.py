"""The conformance matrix: requirement x target -> pass / FAIL / n/a, from test outcomes.

Verdict rules (per requirement and column): FAIL if any test naming the ID failed; error if
none failed but one could not be judged (a setup or teardown error); n/a if every test was
skipped (the target lacked the means); pass if every test that ran passed and at least one ran.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.catalogue import Catalogue, tomllib

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"
VERDICT_PASS, VERDICT_FAIL, VERDICT_NA, VERDICT_ERROR = "pass", "FAIL", "n/a", "error"


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str
    reason: str | None = None
    message: str | None = None
    """Why a failed or errored test did not pass (its assertion or exception message)."""


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
               reason: str | None = None, message: str | None = None,
               pair: str | None = None) -> None:
        """Fold one pytest phase report (setup/call/teardown) into the test's final outcome;
        a test run under a skew ``pair`` also counts in that pair's own cell of the column."""
        self.add_column(column)
        keys = [column]
        if pair:
            seen = self.pairs.setdefault(column, [])
            if pair not in seen:
                seen.append(pair)
            keys.append(pair_label(column, pair))
        for req in req_ids:
            for key in keys:
                self._fold_into(self._tests[(req, key)], nodeid, phase, outcome, reason, message)

    @staticmethod
    def _fold_into(tests: dict[str, TestOutcome], nodeid: str, phase: str, outcome: str,
                   reason: str | None, message: str | None) -> None:
        prev = tests.get(nodeid)
        new = _fold(prev.outcome if prev else None, phase, outcome)
        if new is None:
            return
        keep_reason = reason if new == SKIPPED else None
        keep_message = message if new in (FAILED, ERROR) else None
        tests[nodeid] = TestOutcome(nodeid, new, keep_reason, keep_message)

    def requirement_ids(self, column: str | None = None) -> list[str]:
        return sorted({req for req, c in self._tests if column is None or c == column},
                      key=self.catalogue.order)

    def tests(self, req: str, column: str) -> list[TestOutcome]:
        return list(self._tests.get((req, column), {}).values())

    def verdict(self, req: str, column: str) -> str | None:
        outcomes = [t.outcome for t in self.tests(req, column)]
        if not outcomes:
            return None
        if FAILED in outcomes:
            return VERDICT_FAIL
        if ERROR in outcomes:
            return VERDICT_ERROR
        if all(o == SKIPPED for o in outcomes):
            return VERDICT_NA
        return VERDICT_PASS

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
        counts = defaultdict(int)
        for req in reqs:
            for c in self.columns:
                v = self.verdict(req, c)
                if v:
                    counts[v] += 1
        lines.append(
            "verdicts: " + ", ".join(f"{counts[v]} {v}" for v in
                                     (VERDICT_PASS, VERDICT_FAIL, VERDICT_NA, VERDICT_ERROR)
                                     if counts[v])
        )
        na = sorted({(req, c, t.reason) for req in reqs for c in self.columns
                     for t in self.tests(req, c)
                     if t.outcome == SKIPPED and t.reason and self.verdict(req, c) == VERDICT_NA})
        for req, c, reason in na:
            lines.append(f"  n/a {req} [{c}]: {reason}")
        return lines + self._render_pairs(title_w)

    def _render_pairs(self, title_w: int) -> list[str]:
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

    def to_json(self, seed: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The report shape: one column as the documented flat form; several under columns."""

        def column_doc(column: str) -> dict[str, Any]:
            out = {}
            for req in self.requirement_ids():
                verdict = self.verdict(req, column)
                if verdict is None:
                    continue
                tests = []
                for t in sorted(self.tests(req, column), key=lambda t: t.nodeid):
                    entry = {"nodeid": t.nodeid, "outcome": t.outcome}
                    if t.reason:
                        entry["reason"] = t.reason
                    if t.message:
                        entry["message"] = t.message
                    tests.append(entry)
                out[req] = {"verdict": verdict, "tests": tests}
            return out

        def with_pairs(column: str) -> dict[str, Any]:
            out: dict[str, Any] = {"requirements": column_doc(column)}
            if self.pairs.get(column):
                out["pairs"] = {p: {"requirements": column_doc(pair_label(column, p))}
                                for p in sorted(self.pairs[column])}
            return out

        first = self.columns[0] if self.columns else ""
        doc: dict[str, Any] = {"target": first, "seed": seed, **with_pairs(first)}
        if len(self.columns) > 1:
            doc["columns"] = {c: with_pairs(c) for c in self.columns}
        if extra:
            doc.update(extra)
        return doc

    def write_json(self, path: str | Path, seed: int, extra: dict[str, Any] | None = None) -> None:
        Path(path).write_text(json.dumps(self.to_json(seed, extra), indent=2) + "\n")


def pair_label(column: str, pair: str) -> str:
    """The key of a column's cell for one version-skew pair."""
    return f"{column} [{pair}]"


def _fold(prev: str | None, phase: str, outcome: str) -> str | None:
    """Combine a phase's outcome with what the test already has."""
    if phase == "setup":
        return {PASSED: None, FAILED: ERROR, SKIPPED: SKIPPED}.get(outcome)
    if phase == "call":
        return outcome
    # teardown: an error after a pass means the test could not be judged cleanly
    if outcome == FAILED and prev in (PASSED, None):
        return ERROR
    return None


def load_matrix_columns(spec: str, rootdir: Path) -> list[str]:
    """Target specs of a matrix file: ``[[column]] target = "reference:legacy"`` entries. ``spec``
    is a path, or a name of a file in ``fixtures/matrices/``."""
    import pytest  # noqa: PLC0415

    candidates = [Path(spec), rootdir / spec, rootdir / "fixtures" / "matrices" / f"{spec}.toml"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise pytest.UsageError(
            f"--mc-matrix={spec}: no such file (looked at {', '.join(str(c) for c in candidates)})"
        )
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise pytest.UsageError(f"--mc-matrix={path}: not valid TOML: {exc}") from None
    columns = doc.get("column")
    if not isinstance(columns, list) or not columns:
        raise pytest.UsageError(
            f'--mc-matrix={path}: needs at least one [[column]] table with target = "NAME[:VARIANT]"'
        )
    specs = []
    for i, col in enumerate(columns):
        target = col.get("target") if isinstance(col, dict) else None
        if not isinstance(target, str) or not target.strip():
            raise pytest.UsageError(
                f"--mc-matrix={path}: column {i + 1} has no target string (got {col!r})"
            )
        specs.append(target.strip())
    return specs
