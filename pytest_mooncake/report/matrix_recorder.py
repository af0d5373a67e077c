"""Test reports into the conformance matrix, and the matrix onto the terminal and into JSON.

Every phase report of a requirement test carries, as user properties, the requirement IDs,
its column (target label), its version-skew pair and, when it is n/a, the ``NotApplicable``;
user properties cross xdist, so the recorder runs on the controller only and reads nothing
else from the test. A test whose worker crashed gets its labels from ``crash_labels``.

At session end the failed requirement tests are re-run (``confirmation_runs``) before anything
is judged: a run whose every failure passed on a re-run (intermittent) exits 0 unless
``--mc-fail-on=intermittent``; the re-runs reach JUnit properties and Allure results too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_mooncake.report.allure_glue import allure_results_dir
from pytest_mooncake.report.allure_reruns import mark_reruns
from pytest_mooncake.report.ci_contract import EXIT_NOT_JUDGED, FailOn
from pytest_mooncake.report.confirmation_runs import ConfirmationRuns
from pytest_mooncake.report.conformance_matrix import ConformanceMatrix
from pytest_mooncake.report.crash_labels import CrashLabels, Labels
from pytest_mooncake.report.deployment_seen import SeenDeployments
from pytest_mooncake.report.expectation_gate import ExpectationGate
from pytest_mooncake.report.harness_symptom_lines import harness_symptom_lines
from pytest_mooncake.report.json_report import RunFacts, to_json, write_json
from pytest_mooncake.report.junit_properties import add_rerun_properties
from pytest_mooncake.report.not_applicable import NotApplicable

REQ_PROPERTY = "mc_req"
REQ_MARK = "mc_req"
COLUMN_PROPERTY = "mc_column"
PAIR_PROPERTY = "mc_skew_pair"
UNJUDGED_PROPERTY = "mc_unjudged"
"""Set on a call-phase report whose failure was a component that never started: the test
judged nothing, so it counts as error (like a setup failure), not as FAIL."""
PAIR_ONLY_PROPERTY = "mc_skew_pair_only"
"""Set when the test's skew pair does not involve the column's target: it counts in the pair's
row only."""
ARTIFACT_PROPERTY = "mc_artifact"
"""A file the test wrote for a person to look at (a chaos run's timeline and plot): the JSON
report lists it with the test, and the dashboard links it."""
COUNTEREXAMPLE_PROPERTY = "mc_counterexample"
"""Set on a call-phase report that failed after the test saw the build break an invariant
under a recorded interleaving: the token replaying it (``verdict_rule``: FAIL whatever re-runs
show; the test is not re-run)."""
MESSAGE_LIMIT = 600


def matrix_labels(requirements: list[str], column: str, pair: str | None,
                  pair_only: bool = False) -> Labels:
    """The user properties that place a test's reports in the matrix (none without an
    ``mc_req``)."""
    if not requirements:
        return []
    labels: Labels = [(REQ_PROPERTY, req) for req in requirements]
    labels.append((COLUMN_PROPERTY, column))
    if pair:
        labels.append((PAIR_PROPERTY, pair))
        if pair_only:
            labels.append((PAIR_ONLY_PROPERTY, True))
    return labels


def label_report(report: pytest.TestReport, requirements: list[str], column: str,
                 pair: str | None, not_applicable: NotApplicable | None,
                 unjudged: bool = False, pair_only: bool = False) -> None:
    """Give one phase report what the recorder needs (each phase carries its own copy);
    ``unjudged``: it failed because a component never started (error, not FAIL);
    ``pair_only``: its skew pair does not involve the column's target."""
    if unjudged:
        report.user_properties.append((UNJUDGED_PROPERTY, True))
    report.user_properties.extend(matrix_labels(requirements, column, pair, pair_only))
    if not_applicable is not None:
        report.user_properties.append(not_applicable.as_property())


def _skip_of(report: pytest.TestReport) -> NotApplicable | None:
    """Why a skipped report did not run: its ``NotApplicable``, or a plain skip's text."""
    carried = NotApplicable.from_properties(report.user_properties)
    if carried is not None:
        return carried
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return NotApplicable(None, str(report.longrepr[2]).removeprefix("Skipped: "))
    return None


def failure_message(report: pytest.TestReport) -> str | None:
    """The exception message of a failed phase (what the JSON report says went wrong)."""
    if not report.failed:
        return None
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    text = text.strip()
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


class MatrixRecorder:
    """Folds test reports into the matrix, applies ``--mc-fail-on`` and prints the matrix at the
    end (controller only)."""

    def __init__(self, matrix: ConformanceMatrix, default_column: str,
                 header: Callable[[], list[str]], report_path: str | None, run: RunFacts,
                 fail_on: FailOn | None = None,
                 facts: Callable[[], dict[str, dict[str, str]]] | None = None,
                 confirm: ConfirmationRuns | None = None,
                 expectations: ExpectationGate | None = None):
        self.matrix = matrix
        self.confirm = confirm
        self.run_failures: dict[str, bool] = {}
        """Every test with a failed report in the run -> whether that failure was a FAIL of a
        requirement (a call-phase failure that judged): only those can turn out intermittent."""
        self.failed_reports = 0
        self.exit_note: str | None = None
        self.default_column = default_column
        self.header = header
        self.report_path = report_path
        self.run = run
        self.fail_on = fail_on or FailOn()
        self.run.fail_on = self.fail_on.spec
        self.facts = facts
        self.expectations = expectations
        """``--mc-expect``: decides the exit status from the verdicts (``expectation_gate``)."""
        self._collected: dict[str, set[str]] = {}
        """Per column, its target's version and notes (read when the session starts)."""
        self._clock = time.monotonic()
        self.crash_labels = CrashLabels()
        self.seen = SeenDeployments()
        """The master configurations each column's tests started (``deployment_seen``)."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport,
                               sched: Any) -> None:
        """xdist's report of a test whose worker died: give it the test's labels, so the
        crash counts as an error of its requirements (a phase the verdict rule calls a crash)."""
        report.user_properties.extend(self.crash_labels.of(crashitem))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.run.started = time.time()
        self._clock = time.monotonic()
        self._exit = 0
        if self.facts is not None:
            self.run.targets = self.facts()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = report.user_properties
        reqs = [v for k, v in props if k == REQ_PROPERTY]
        if report.failed:
            self.failed_reports += 1
            judged = bool(reqs) and report.when == "call" and not any(
                k == UNJUDGED_PROPERTY for k, _ in props)
            self.run_failures[report.nodeid] = self.run_failures.get(report.nodeid, True) \
                and judged
        if not reqs:
            if report.failed and self.expectations is not None:
                self.expectations.note_failure(report.nodeid)
            return
        self.crash_labels.remember(report.nodeid, [(k, v) for k, v in props
                                                   if k in (REQ_PROPERTY, COLUMN_PROPERTY,
                                                            PAIR_PROPERTY, PAIR_ONLY_PROPERTY)])
        column = next((v for k, v in props if k == COLUMN_PROPERTY), self.default_column)
        pair = next((v for k, v in props if k == PAIR_PROPERTY), None)
        self.seen.record(column, report.when, props)
        when = "setup" if any(k == UNJUDGED_PROPERTY for k, _ in props) else report.when
        self.matrix.record(reqs, column, report.nodeid, when, report.outcome,
                           _skip_of(report) if report.skipped else None,
                           failure_message(report), pair,
                           pair_only=any(k == PAIR_ONLY_PROPERTY for k, _ in props),
                           duration=report.duration,
                           artifacts=tuple(v for k, v in props if k == ARTIFACT_PROPERTY),
                           counterexample=next((v for k, v in props
                                                if k == COUNTEREXAMPLE_PROPERTY), None))

    def pytest_unconfigure(self) -> None:
        self.crash_labels.close()

    def _collected_lines(self) -> list[str]:
        reqs = sorted(self._collected, key=self.matrix.catalogue.order)
        if not reqs:
            return [*self.header(), "no collected test names a requirement (mark tests with mc_req)"]
        tests = {n for nodes in self._collected.values() for n in nodes}
        return [*self.header(),
                f"collected {len(tests)} test(s) naming {len(reqs)} requirement(s); no verdicts "
                f"without running them (--collect-only):",
                *(f"  {req:<10} {len(self._collected[req])} test(s)" for req in reqs)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Apply the ``--mc-fail-on`` rule: a run pytest would pass exits ``EXIT_NOT_JUDGED``
        where the rule finds a breach (a failing run keeps its own status). Nothing is judged
        when only collecting."""
        if session.config.option.collectonly:
            self.run.duration = time.monotonic() - self._clock
            return
        self._confirm(session)
        self.run.duration = time.monotonic() - self._clock
        if self.expectations is not None:  # judged on the confirmed verdicts (intermittent too)
            session.exitstatus = self.expectations.exit_status(
                to_json(self.matrix, self.run), session.exitstatus)
            self.run.extra["expectations"] = self.expectations.as_json()
        self.run.fail_on_problems = self.fail_on.problems(self.matrix)
        if self.run.fail_on_problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_NOT_JUDGED
        self._exit = int(session.exitstatus)

    def _confirm(self, session: pytest.Session) -> None:
        """Re-run the failed requirement tests; a run whose every failure passed on a re-run
        exits 0 (its requirements are intermittent, which ``--mc-fail-on`` may refuse)."""
        config = session.config
        if self.confirm is None or self.confirm.count <= 0 or not self.matrix.failed_nodeids():
            return
        if session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return  # interrupted, or pytest broke: nothing to confirm
        if config.getoption("usepdb", False) or config.getoption("trace", False):
            self.exit_note = "no re-runs under --pdb/--trace (a re-run would wait on a debugger)"
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")  # off the progress line
            reporter.write_sep("-", f"mooncake: re-running failed tests (--mc-confirm="
                                    f"{self.confirm.count})")
        say = reporter.write_line if reporter is not None else print
        self.run.reruns = self.confirm.run(self.matrix, say)
        self.run.not_rerun = dict(self.confirm.left)
        add_rerun_properties(config, self.matrix)
        mark_reruns(allure_results_dir(config), self.matrix)
        if (session.exitstatus == pytest.ExitCode.TESTS_FAILED and self.run_failures
                and all(self.run_failures.values())
                and session.testsfailed == self.failed_reports
                and all(self.matrix.passed_on_rerun(n) for n in self.run_failures)):
            session.exitstatus = pytest.ExitCode.OK
            self.exit_note = (f"exit status 0: each of the {len(self.run_failures)} failed "
                              f"test(s) passed on a re-run (intermittent); "
                              f"--mc-fail-on=intermittent refuses such a run")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """What ``--collect-only`` shows instead of a matrix: the requirements collected."""
        self._collected = {}
        for item in session.items:
            for mark in item.iter_markers(REQ_MARK):
                for req in mark.args:
                    self._collected.setdefault(req, set()).add(item.nodeid)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("mooncake conformance matrix")
        if terminalreporter.config.option.collectonly:
            for line in self._collected_lines():
                terminalreporter.write_line(line)
            return
        if self.expectations is not None:  # first: what a CI job fails on
            for line in self.expectations.lines():
                terminalreporter.write_line(line, red=line.lstrip().startswith(
                    ("regression", "changed", "failed without")), bold=self.expectations.regressed())
        for line in self.matrix.render(self.header()):
            terminalreporter.write_line(line)
        for record in self.run.reruns:
            if record.problem:
                terminalreporter.write_line(f"re-run with --mc-seed={record.seed} judged "
                                            f"nothing: {record.problem}", yellow=True)
        if self.exit_note:
            terminalreporter.write_line(self.exit_note)
        self.seen.merge(self.run.targets)
        doc = to_json(self.matrix, self.run)
        for line in harness_symptom_lines(doc):
            terminalreporter.write_line(line, yellow=True)
        differences = doc.get("profile_differences", [])
        if differences:
            terminalreporter.write_line("verdicts that depend on the deployment profile:")
            for line in differences:
                terminalreporter.write_line(f"  {line}")
        problems = self.run.fail_on_problems
        if problems:
            terminalreporter.write_line(
                f"--mc-fail-on={self.fail_on.spec}: {len(problems)} problem(s), exit status "
                f"{self._exit}:", red=True)
            for line in problems:
                terminalreporter.write_line(f"  {line}", red=True)
        if self.report_path:
            write_json(self.matrix, self.report_path, self.run)
            terminalreporter.write_line(f"JSON report written to {self.report_path}")
