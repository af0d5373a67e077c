"""The conformance matrix: requirement x target -> pass / FAIL / intermittent / n/a / error,
from test outcomes.

It collects one outcome per test, requirement and column (``verdict_rule`` folds the phases
and gives the verdict), the outcomes of the re-runs of failed tests (``confirmation_runs``),
and renders the terminal table; ``json_report`` writes it as JSON.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
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
    VERDICT_INTERMITTENT,
    VERDICT_NA,
    VERDICT_PASS,
    VERDICTS,
    fold_phase,
    verdict,
    verdict_of_runs,
)


@dataclass(frozen=True)
class Rerun:
    """One re-run of a failed test: the session seed it ran with and what it did."""

    seed: int
    outcome: str
    message: str | None = None
    duration: float = 0.0
    counterexample: str | None = None
    """The replay token of the interleaving under which this run saw the build break an
    invariant (``verdict_rule``: a counterexample is FAIL)."""


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
    reruns: list[Rerun] = field(default_factory=list)
    """Its re-runs, in order (only a test that failed is re-run)."""
    counterexample: str | None = None
    """When it failed in the run on an interleaving that broke an invariant: that
    interleaving's replay token (``verdict_rule``: a counterexample is FAIL)."""

    @property
    def found_counterexample(self) -> bool:
        """Whether the run or a re-run of it failed on a counterexample."""
        return bool(self.counterexample) or any(r.counterexample for r in self.reruns)

    @property
    def reason(self) -> str | None:
        return self.not_applicable.reason if self.not_applicable else None

    @property
    def outcomes(self) -> list[str]:
        """Its outcome in the run, then in each re-run."""
        return [self.outcome] + [r.outcome for r in self.reruns]


@dataclass(frozen=True)
class RunTally:
    """How a requirement fared in each run of its re-run tests: the run itself first, then each
    re-run, as (session seed, verdict of that run: FAIL, pass or error)."""

    runs: list[tuple[int, str]]

    @classmethod
    def of_test(cls, seed: int, test: TestOutcome) -> RunTally:
        """One test's runs (``seed``: the run's own)."""
        outcomes = [(seed, test.outcome), *((r.seed, r.outcome) for r in test.reruns)]
        return cls([(s, _run_verdict([o])) for s, o in outcomes])

    @property
    def failed(self) -> int:
        return sum(v == VERDICT_FAIL for _, v in self.runs)

    @property
    def judged(self) -> int:
        """Runs that judged it (FAIL or pass): the N of k/N."""
        return sum(v in (VERDICT_FAIL, VERDICT_PASS) for _, v in self.runs)

    def seeds(self, verdict: str) -> list[int]:
        return [seed for seed, v in self.runs if v == verdict]

    @property
    def ratio(self) -> str:
        """``k/N``: failed in k of the N runs that judged it."""
        return f"{self.failed}/{self.judged}"

    def describe(self) -> str:
        """``failed in 2 of 3 runs (seeds 4, 4), passed in 1 (seed 91)``."""
        parts = [f"failed in {self.failed} of {self.judged} run{'s' if self.judged != 1 else ''}"
                 f" ({_seeds(self.seeds(VERDICT_FAIL))})"]
        passed = self.seeds(VERDICT_PASS)
        if passed:
            parts.append(f"passed in {len(passed)} ({_seeds(passed)})")
        errors = self.seeds(VERDICT_ERROR)
        if errors:
            parts.append(f"not judged in {len(errors)} ({_seeds(errors)})")
        return ", ".join(parts)


def _run_verdict(outcomes: list[str]) -> str:
    """One run's verdict from its re-run tests: FAIL, pass, or error (it judged nothing)."""
    judged = verdict(outcomes)
    return judged if judged in (VERDICT_FAIL, VERDICT_PASS) else VERDICT_ERROR


def _seeds(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}"


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

    seed: int = 0
    """The run's session seed (``--mc-seed``): the seed of every test's first run."""
    replay: Callable[[int, str], str] | None = None
    """The command line that runs one test (nodeid) with one session seed, when known."""

    def add_column(self, column: str) -> None:
        if column not in self.columns:
            self.columns.append(column)

    def record(self, req_ids: list[str], column: str, nodeid: str, phase: str, outcome: str,
               not_applicable: NotApplicable | None = None, message: str | None = None,
               pair: str | None = None, pair_only: bool = False,
               duration: float = 0.0, artifacts: tuple[str, ...] = (),
               counterexample: str | None = None) -> None:
        """Fold one pytest phase report (setup/call/teardown) into the test's final outcome;
        a test run under a skew ``pair`` also counts in that pair's own cell of the column
        (only there with ``pair_only``: a pair that does not involve the column's target);
        ``counterexample``: the replay token of the interleaving its failure was found under."""
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
                                message, duration, artifacts, counterexample)

    @staticmethod
    def _fold_into(tests: dict[str, TestOutcome], nodeid: str, phase: str, outcome: str,
                   not_applicable: NotApplicable | None, message: str | None,
                   duration: float, artifacts: tuple[str, ...] = (),
                   counterexample: str | None = None) -> None:
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
        tests[nodeid] = TestOutcome(nodeid, new, keep_na, keep_message, spent, files,
                                    counterexample=counterexample if new == FAILED else None)

    def failed_nodeids(self) -> list[str]:
        """Every test that failed in the run (its requirements are FAIL): what is re-run."""
        return sorted({t.nodeid for tests in self._tests.values() for t in tests.values()
                       if t.outcome == FAILED})

    def record_rerun(self, nodeid: str, rerun: Rerun) -> None:
        """One more run of a failed test, in every cell it counts in."""
        for tests in self._tests.values():
            test = tests.get(nodeid)
            if test is not None and test.outcome:
                test.reruns.append(rerun)

    def rerun_tests(self) -> dict[str, TestOutcome]:
        """Every re-run test by nodeid (one entry per test, whichever cells it counts in)."""
        return {nodeid: t for tests in self._tests.values() for nodeid, t in tests.items()
                if t.reruns}

    def passed_on_rerun(self, nodeid: str) -> bool:
        """Whether a re-run of ``nodeid`` passed (its failure did not reproduce every time)."""
        return any(r.outcome == PASSED for tests in self._tests.values()
                   if nodeid in tests for r in tests[nodeid].reruns)

    def requirement_ids(self, column: str | None = None) -> list[str]:
        return sorted({req for req, c in self._tests if column is None or c == column},
                      key=self.catalogue.order)

    def tests(self, req: str, column: str) -> list[TestOutcome]:
        return [t for t in self._tests.get((req, column), {}).values() if t.outcome]

    def verdict(self, req: str, column: str) -> str | None:
        tests = self.tests(req, column)
        return verdict_of_runs([t.outcomes for t in tests],
                               [t.found_counterexample for t in tests])

    def counterexample_tests(self) -> dict[str, str]:
        """Failed tests whose failure in the run was a counterexample -> its replay token."""
        return {t.nodeid: t.counterexample for tests in self._tests.values()
                for t in tests.values() if t.outcome == FAILED and t.counterexample}

    def tally(self, req: str, column: str) -> RunTally | None:
        """Per run of the requirement's re-run tests, its verdict in that run; None when none of
        its tests was re-run."""
        rerun = [t for t in self.tests(req, column) if t.reruns]
        if not rerun:
            return None
        count = max(len(t.reruns) for t in rerun)
        runs = [(self.seed, _run_verdict([t.outcome for t in rerun]))]
        for i in range(count):
            seeds = [t.reruns[i].seed for t in rerun if i < len(t.reruns)]
            outcomes = [t.reruns[i].outcome if i < len(t.reruns) else ERROR for t in rerun]
            runs.append((seeds[0], _run_verdict(outcomes)))
        return RunTally(runs)

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
        if verdict == VERDICT_INTERMITTENT:
            tally = self.tally(req, column)
            return f"intermittent {tally.ratio}" if tally else "intermittent"
        reasons = {t.reason for t in tests if t.reason}
        return f"n/a ({len(reasons)} reason{'s' if len(reasons) != 1 else ''})"

    def render(self, header: list[str]) -> list[str]:
        reqs = self.requirement_ids()
        lines = list(header)
        if not reqs:
            lines.append("no collected test names a requirement (mark tests with mc_req)")
            return lines
        title_w = 60
        col_w = self._widths(reqs)
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
        return lines + self._render_reruns() + self._render_pairs()

    def _widths(self, reqs: list[str], pair: str | None = None) -> list[int]:
        """Each column's width: its label's, its widest cell's, at least 12."""
        return [max(12, len(c), *(len(self.cell(r, pair_label(c, pair) if pair else c))
                                  for r in reqs)) for c in self.columns]

    def cells(self) -> list[tuple[str, str]]:
        """(requirement, cell key) of every cell that has a verdict: columns, then pairs."""
        keys = list(self.columns) + [pair_label(c, p) for c in self.columns
                                     for p in sorted(self.pairs.get(c, ()))]
        return [(req, key) for key in keys for req in self.requirement_ids(key)]

    def _render_reruns(self) -> list[str]:
        """Each cell whose failed tests were re-run: an intermittent one with how it fared per
        run and the command replaying each test's first failing run; FAILs that reproduced
        alike, one line per column (their replay commands are in the JSON report)."""
        lines = []
        reproduced: dict[tuple[str, str], list[str]] = {}
        for req, key in self.cells():
            tally = self.tally(req, key)
            if tally is None:
                continue
            if self.verdict(req, key) == VERDICT_FAIL:
                reproduced.setdefault((key, tally.describe()), []).append(req)
                continue
            lines.append(f"  {VERDICT_INTERMITTENT} {req} [{key}]: {tally.describe()}")
            lines += [f"    replay: {command}" for command in self.replays(req, key)]
        lines += [f"  {VERDICT_FAIL} {', '.join(reqs)} [{key}]: {described}"
                  for (key, described), reqs in reproduced.items()]
        return lines

    def replays(self, req: str, key: str) -> list[str]:
        """For each re-run test of a cell, the command replaying its first failing run."""
        out = []
        for t in sorted(self.tests(req, key), key=lambda t: t.nodeid):
            runs = [(self.seed, t.outcome), *((r.seed, r.outcome) for r in t.reruns)]
            seed = next((s for s, o in runs if o == FAILED), None)
            if t.reruns and seed is not None and self.replay is not None:
                out.append(self.replay(seed, t.nodeid))
        return out

    def _render_pairs(self) -> list[str]:
        """Version-skew pairs: a row per requirement and pair, a column per target."""
        rows = sorted({(req, pair) for c in self.columns for pair in self.pairs.get(c, ())
                       for req in self.requirement_ids(pair_label(c, pair))},
                      key=lambda row: (self.catalogue.order(row[0]), row[1]))
        if not rows:
            return []
        pair_w = max(len(p) for _, p in rows)
        col_w = [max(w for w in ws) for ws in zip(*(self._widths([r], p) for r, p in rows),
                                                     strict=True)]
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
