"""The verdict rule: from the outcomes of the tests naming a requirement to one verdict.

Per requirement and column: FAIL if any test naming the ID failed; error if none failed but
one could not be judged (a setup or teardown error, or its xdist worker crashed); n/a if every test was skipped (the target
lacked the means); pass if every test that ran passed and at least one ran.

With re-runs (``--mc-confirm``, ``confirmation_runs``) a test has an outcome per run of it, the
first from the run itself: a test that failed and never passed keeps FAIL; a test seen both
failing and passing makes its requirement **intermittent**, unless the requirement FAILs in
every run anyway (another test FAILs every time, or the tests seen both ways fail in turns);
a test never re-run counts with its one outcome.

A **counterexample** is FAIL whatever the other runs show: a failed run of a test that saw the
build break an invariant under a recorded interleaving (an RDMA exploration's or pinned
schedule's violation, with the token that replays it). Those requirements quantify over
interleavings ("under every explored interleaving ..."); one interleaving that breaks them
refutes them, and a run that explored others and missed it shows nothing about that one. A
concurrency bug met with a probability is the build's, not the harness's (a harness that
could not let the build run, e.g. starved of CPU, is error, never a counterexample), so it
must not read as "intermittent", which would vary from run to run with the odds of meeting it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import zip_longest

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"
VERDICT_PASS, VERDICT_FAIL, VERDICT_NA, VERDICT_ERROR = "pass", "FAIL", "n/a", "error"
VERDICT_INTERMITTENT = "intermittent"
VERDICTS = (VERDICT_PASS, VERDICT_FAIL, VERDICT_INTERMITTENT, VERDICT_NA, VERDICT_ERROR)


def verdict(outcomes: Iterable[str]) -> str | None:
    """The verdict of one requirement in one column; None when no test named it."""
    outcomes = list(outcomes)
    if not outcomes:
        return None
    if FAILED in outcomes:
        return VERDICT_FAIL
    if ERROR in outcomes:
        return VERDICT_ERROR
    if all(o == SKIPPED for o in outcomes):
        return VERDICT_NA
    return VERDICT_PASS


def verdict_of_runs(runs: Iterable[Sequence[str]],
                    counterexamples: Iterable[bool] = ()) -> str | None:
    """The verdict of one requirement in one column from each test's outcomes, one per run of
    the test (the run itself first, then its re-runs); None when no test named it.
    ``counterexamples``: per test, in the same order, whether a failed run of it found a
    counterexample (FAIL, whatever its other runs did)."""
    pairs = [(list(r), bool(f)) for r, f in zip_longest(runs, counterexamples, fillvalue=False)
             if r]
    if not pairs:
        return None
    runs = [r for r, _ in pairs]
    if any(f and FAILED in r for r, f in pairs):
        return VERDICT_FAIL
    if any(FAILED in r and PASSED not in r for r in runs):
        return VERDICT_FAIL
    if any(FAILED in r and PASSED in r for r in runs):
        # the requirement per run: the k-th outcome of each re-run test (every re-run runs
        # them with the same seeds in the same order), the one outcome of a test never re-run.
        # Two tests each seen both ways may still FAIL the requirement in every run (an
        # exploration finding the bug in one scenario or another each time): that is FAIL
        # reproduced, not intermittent.
        width = max(len(r) for r in runs)
        failed_runs = sum(any((r[k] if k < len(r) else r[0]) == FAILED for r in runs)
                          for k in range(width))
        return VERDICT_FAIL if failed_runs == width else VERDICT_INTERMITTENT
    return verdict(r[0] for r in runs)


def fold_phase(prev: str | None, phase: str, outcome: str) -> str | None:
    """A test's outcome after one more pytest phase report (setup/call/teardown, or the report
    of a crash: xdist's worker died under the test); None when the phase changes nothing."""
    if phase not in ("setup", "call", "teardown"):
        # A crash could not judge the test: an error, unless it had already failed.
        return None if prev == FAILED else ERROR
    if phase == "setup":
        return {PASSED: None, FAILED: ERROR, SKIPPED: SKIPPED}.get(outcome)
    if phase == "call":
        return outcome
    # teardown: an error after a pass means the test could not be judged cleanly
    if outcome == FAILED and prev in (PASSED, None):
        return ERROR
    return None
