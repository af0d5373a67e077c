"""``--mc-confirm-only=deviations``: with ``--mc-expect``, re-run only the failed tests whose
FAIL is not what the expectations file says.

A gate's known FAILs fail on every run; confirming each of them twice (``--mc-confirm=2``) is
most of a gating run's time (0.3.13.post1: 39 failed tests, each re-run twice). The re-runs
exist so that a FAIL says something about the build, not about one unlucky run; a failure the
expectations already record (from the confirmed runs that wrote them) is left at its one run,
and the re-runs go to the failures that would change the gate: regressions.

A failed test is left alone only when every cell it counts in expects FAIL: for each of its
requirements in its column, the requirement's expected verdicts (the file's default for one it
does not list) include FAIL, and so do those of the test and of its skew pair where the file
lists them; a column without expectations, or a pair the file does not list, is re-run. The
report keeps each test left alone with why (``reruns.not_rerun``), so its FAIL reads as one
run: a known FAIL that became intermittent is seen only by a run without the option."""

from __future__ import annotations

from pytest_mooncake.report.conformance_matrix import ConformanceMatrix, pair_label
from pytest_mooncake.report.expectations import Expectation, Expectations
from pytest_mooncake.report.report_columns import column_free_id
from pytest_mooncake.report.verdict_rule import FAILED

CHOICES = ("all", "deviations", "witnesses")


def _cells(matrix: ConformanceMatrix) -> dict[str, tuple[str, str | None]]:
    """Cell key -> (column, skew pair or None)."""
    out: dict[str, tuple[str, str | None]] = {c: (c, None) for c in matrix.columns}
    for column in matrix.columns:
        for pair in matrix.pairs.get(column, ()):
            out[pair_label(column, pair)] = (column, pair)
    return out


def _expects_fail(expected: Expectation | None) -> bool:
    return expected is not None and "FAIL" in expected.verdicts


def expected_failures(matrix: ConformanceMatrix,
                      expectations: Expectations | None) -> dict[str, str]:
    """Failed tests (node id -> why) that every cell they count in expects to FAIL."""
    if expectations is None:
        return {}
    cells = _cells(matrix)
    covered: dict[str, list[str]] = {}
    refused: set[str] = set()
    for req, key in matrix.cells():
        column, pair = cells.get(key, (key, None))
        target = expectations.for_column(column)
        for test in matrix.tests(req, key):
            if test.outcome != FAILED:
                continue
            nodeid = test.nodeid
            listed_test = target.tests.get((req, column_free_id(nodeid, column))) \
                if target is not None else None
            ok = (target is not None and _expects_fail(target.of(req))
                  and (listed_test is None or _expects_fail(listed_test))
                  and (pair is None or _expects_fail(target.pairs.get((req, pair)))))
            if ok:
                covered.setdefault(nodeid, []).append(
                    f"{req}" + (f" [pair {pair}]" if pair else ""))
            else:
                refused.add(nodeid)
    return {nodeid: (f"FAIL expected ({', '.join(sorted(set(where)))} in "
                     f"{expectations.spec}); not re-run under --mc-confirm-only=deviations")
            for nodeid, where in sorted(covered.items()) if nodeid not in refused}
