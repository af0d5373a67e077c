"""pytest hooks of pytest-mooncake. Each hook only wires the modules that hold the logic:
``config/`` (options, markers, stash keys, run matrices), ``targets/`` (which implementation a
test runs against), ``report/`` (matrix, n/a, failure logs, leaks) and ``runtime/``."""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.config import compute_slots, longest_first, markers
from pytest_mooncake.config import options as mc_options
from pytest_mooncake.config.item_facts import (
    requirement_ids,
    skew_pair_id,
    skew_pair_involves_target,
    target_for,
)
from pytest_mooncake.config.run_matrices import load_matrix
from pytest_mooncake.config.stash_keys import (
    MC_CONFIG,
    MC_MATRIX,
    MC_TARGET,
    MC_TARGETS,
    PREEXISTING_PROCESSES,
)
from pytest_mooncake.fixtures.network_faults import toxiproxy_url
from pytest_mooncake.fixtures.rdma_completions import REPLAY_TOKENS, replay_sections
from pytest_mooncake.report import ci_contract, crash_labels
from pytest_mooncake.report.allure_glue import allure_results_dir, attach_text
from pytest_mooncake.report.allure_run_files import (
    ALLURERC,
    environment,
    etcd_version,
    write_run_files,
)
from pytest_mooncake.report.catalogue import load_catalogue
from pytest_mooncake.report.confirmation_runs import ConfirmationRuns
from pytest_mooncake.report.conformance_matrix import ConformanceMatrix
from pytest_mooncake.report.expectation_gate import ExpectationGate
from pytest_mooncake.report.expected_failures import expected_failures
from pytest_mooncake.report.failure_logs import attach_passing_logs, show_failure_logs, tail
from pytest_mooncake.report.json_report import RunFacts
from pytest_mooncake.report.junit_properties import add_run_properties
from pytest_mooncake.report.matrix_recorder import (
    COUNTEREXAMPLE_PROPERTY,
    MatrixRecorder,
    label_report,
    matrix_labels,
)
from pytest_mooncake.report.process_leaks import owned_before, reap_leaks
from pytest_mooncake.report.profile_differences import deployment_line
from pytest_mooncake.report.replay_commands import PytestCommand
from pytest_mooncake.runtime.die_with_parent import die_with
from pytest_mooncake.runtime.etcd_process import sweep_abandoned_data_dirs
from pytest_mooncake.runtime.fork_server import ForkServers
from pytest_mooncake.runtime.ports import sweep_stale_claims
from pytest_mooncake.runtime.processes import reap_all, spawn_popen, use_fork_servers
from pytest_mooncake.targets import (
    ComponentStartError,
    PreconditionUnestablished,
    Target,
    TargetLacks,
    UnknownTarget,
    resolve_target,
)
from pytest_mooncake.targets.reference.process_env import FORKED_MODULES


def pytest_addoption(parser: pytest.Parser) -> None:
    mc_options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    # etcd3 0.12's generated protobuf modules use APIs protobuf 3.20 deprecates: noise, not news.
    config.addinivalue_line(
        "filterwarnings", "ignore:Call to deprecated create function:DeprecationWarning"
    )
    workerinput = getattr(config, "workerinput", {})
    if workerinput.get(CONTROLLER_PID_KEY):
        # A worker dies with its controller (kill -9 of pytest), and so do its children.
        die_with(workerinput[CONTROLLER_PID_KEY])
    inherited = workerinput.get("mc_seed")
    mc_config = mc_options.resolve(mc_options.raw_values(config), inherited_seed=inherited)
    targets = _resolve_targets(mc_config, Path(config.rootpath))
    config.stash[MC_CONFIG] = mc_config
    if mc_config.fork_server == "auto":
        servers = ForkServers(FORKED_MODULES, spawn_popen)
        before = use_fork_servers(servers)
        config.add_cleanup(servers.close)  # runs second: the servers' children are reaped by then
        config.add_cleanup(lambda: use_fork_servers(before))  # a pytester session's end
    for target in targets.values():
        target.use_verbs(mc_config.verbs)
    config.stash[MC_TARGETS] = targets
    config.stash[MC_TARGET] = next(iter(targets.values()))
    matrix = ConformanceMatrix(load_catalogue(), seed=mc_config.seed)
    for label in targets:
        matrix.add_column(label)
    config.stash[MC_MATRIX] = matrix
    longest_first.install(config, mc_config.durations, lambda item: target_for(item).label)
    compute_slots.install(config, mc_config.compute_slots, longest_first.workers(config))
    ci_contract.check_ids(mc_config.fail_on, matrix.catalogue)
    recorder = None
    if not hasattr(config, "workerinput"):
        gate = None
        if mc_config.expect:
            gate = ExpectationGate.from_options(mc_config.expect, Path(config.rootpath),
                                                mc_config.expect_strict,
                                                mc_config.expect_update, matrix.catalogue)
            gate.check_columns(list(targets))
        command = PytestCommand.of(config)
        matrix.replay = command.replay
        recorder = MatrixRecorder(matrix, config.stash[MC_TARGET].label,
                                  lambda: _matrix_header(config), mc_config.report,
                                  RunFacts(mc_config.seed, matrix=mc_config.matrix,
                                           confirm=mc_config.confirm),
                                  mc_config.fail_on, lambda: _column_facts(config),
                                  ConfirmationRuns(command, mc_config.confirm,
                                                   lambda: _rerun_dir(config),
                                                   lambda d: _rerun_outputs(config, d),
                                                   _known_failures(mc_config, gate),
                                                   mc_config.confirm_only == "witnesses"),
                                  gate)
        config.pluginmanager.register(recorder, "mooncake-matrix")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(recorder), "mooncake-xdist")


CONTROLLER_PID_KEY = "mc_controller_pid"


def _rerun_dir(config: pytest.Config) -> Path:
    """Where the re-runs of failed tests keep their output: a directory of the session's base
    temporary directory (pytest keeps the last three), or a fresh temporary one."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return factory.mktemp("mc-confirm", numbered=True)
    return Path(tempfile.mkdtemp(prefix="mc-confirm-"))


def _rerun_outputs(config: pytest.Config, directory: Path) -> dict[str, str]:
    """A re-run writes its JUnit XML and Allure results (when the run writes them, also through
    ini ``addopts``) into its own directory, not over the run's."""
    out = {}
    if config.getoption("xmlpath", None):
        out["--junitxml"] = str(directory / "junit.xml")
    if allure_results_dir(config):
        out["--alluredir"] = str(directory / "allure")
    return out


def _resolve_targets(mc_config: mc_options.McConfig, rootpath: Path) -> dict[str, Target]:
    """The session's targets by label: ``--mc-target``, or a ``--mc-matrix``'s columns."""
    if mc_config.matrix:
        columns = [(c.target, {"metadata": c.metadata, "ha": c.ha})
                   for c in load_matrix(mc_config.matrix, rootpath)]
        where = f"--mc-matrix={mc_config.matrix}"
    else:
        columns, where = [(mc_config.target, {})], "--mc-target"
    targets: dict[str, Target] = {}
    for spec, backends in columns:
        try:
            target = resolve_target(spec).with_backends(**backends)
        except UnknownTarget as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
        targets.setdefault(target.label, target)
    return targets


class _XdistHooks:
    """Hands the controller's seed to every worker so all of them draw from one seed, and the
    directory where workers leave the labels of their tests for a crash (``crash_labels``)."""

    def __init__(self, recorder: MatrixRecorder | None):
        self.recorder = recorder

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["mc_seed"] = node.config.stash[MC_CONFIG].seed
        node.workerinput[CONTROLLER_PID_KEY] = os.getpid()
        if self.recorder is not None:
            node.workerinput[crash_labels.WORKERINPUT_KEY] = \
                self.recorder.crash_labels.directory_for_workers()


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker: publish the labels of every collected test (``crash_labels``)."""
    workerinput = getattr(session.config, "workerinput", {})
    directory = workerinput.get(crash_labels.WORKERINPUT_KEY)
    if directory:
        crash_labels.publish(directory, workerinput.get("workerid", "gw"), {
            item.nodeid: _matrix_labels_of(item) for item in session.items
            if requirement_ids(item)})


def _matrix_labels_of(item: pytest.Item) -> list:
    label = target_for(item).label
    return matrix_labels(requirement_ids(item), label, skew_pair_id(item),
                         pair_only=not skew_pair_involves_target(item, label))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    targets = metafunc.config.stash[MC_TARGETS]
    if len(targets) > 1 and "mc_target" in metafunc.fixturenames:
        labels = list(targets)
        metafunc.parametrize("mc_target", labels, indirect=True, scope="session", ids=labels)


def pytest_report_header(config: pytest.Config) -> list[str]:
    mc = config.stash[MC_CONFIG]
    targets = config.stash[MC_TARGETS]
    if len(targets) > 1:
        lines = [f"mooncake: matrix {mc.matrix}, seed={mc.seed}, columns:"]
        lines += [f"mooncake:   {t.label}: {_described(t)}" for t in targets.values()]
        return lines
    target = config.stash[MC_TARGET]
    etcd = ",".join(mc.etcd) if mc.etcd else "start one per worker"
    toxi = toxiproxy_url(config) or "embedded Toxiproxy-compatible server"
    seed_note = "" if mc.seed_was_given else f" (random; rerun with --mc-seed={mc.seed})"
    return [
        f"mooncake: target={target.label} ({_described(target)}) seed={mc.seed}{seed_note}",
        f"mooncake: etcd={etcd} toxiproxy={toxi} verbs={mc.verbs}",
    ]


def _described(target: Target) -> str:
    """Its version, its deployment profile where it has one (``judged_configuration``) and,
    where libraries are supplied here, which (``CUDA: stand-in driver, no device``)."""
    text = f"{target.version}; {target.notes}" if target.notes else target.version
    line = deployment_line(_deployment(target))
    return f"{text}; deployed: {line}" if line else text


def _deployment(target: Target) -> dict[str, Any] | None:
    """The deployment a target records (a real build's; None for the reference engine),
    asked once per session."""
    if not hasattr(target, "deployment"):
        return None
    cached = getattr(target, "_mc_deployment", None)
    if cached is None:
        cached = target.deployment()
        target._mc_deployment = cached  # type: ignore[attr-defined]
    return cached


def _column_facts(config: pytest.Config) -> dict[str, dict[str, Any]]:
    """Per column, what the JSON report records of its target: version, notes and the
    deployment it judged."""
    facts: dict[str, dict[str, Any]] = {}
    for label, t in config.stash[MC_TARGETS].items():
        facts[label] = {"version": t.version, "notes": t.notes}
        deployment = _deployment(t)
        if deployment is not None:
            facts[label]["deployment"] = deployment
    return facts


def _known_failures(mc: mc_options.McConfig, gate: ExpectationGate | None) -> Any:
    """What ``--mc-confirm-only=deviations`` leaves un-re-run (None: every failed test is)."""
    if mc.confirm_only != "deviations" or gate is None:
        return None
    return lambda matrix: expected_failures(matrix, gate.expectations)


def _matrix_header(config: pytest.Config) -> list[str]:
    mc = config.stash[MC_CONFIG]
    targets = config.stash[MC_TARGETS]
    if len(targets) > 1:
        return [f"matrix: {mc.matrix}    seed: {mc.seed}"] + [
            f"  {t.label}: {_described(t)}" for t in targets.values()]
    target = config.stash[MC_TARGET]
    return [f"target: {target.label} ({_described(target)})    seed: {mc.seed}"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Validate the markers, make requirement IDs ``-k`` keywords (before ``-k`` deselects),
    and apply ``--mc-only``."""
    catalogue = load_catalogue()
    markers.check_and_label(items, catalogue)
    markers.select_only(config, items, config.stash[MC_CONFIG].only, catalogue)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test whose ``mc_requires`` names a means its target lacks is n/a: ``TargetLacks``,
    turned into the n/a report below like one raised by a factory; one whose ``mc_demands``
    names an interface it lacks FAILs (the report below)."""
    missing = markers.missing_means(item, target_for(item))
    if missing:
        raise TargetLacks(*missing)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """An interface ``mc_demands`` names and the target lacks: raised in the call phase, so the
    report below makes it a FAIL of the test (a setup failure would read as an error)."""
    missing = markers.missing_means(item, target_for(item), "mc_demands")
    if missing:
        raise TargetLacks(*missing)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    not_applicable = None
    if call.excinfo is not None and call.excinfo.errisinstance(TargetLacks):
        lacks = call.excinfo.value
        if lacks.capability in markers.demanded(item):
            report.outcome = "failed"
            report.longrepr = markers.demand_failure(item, lacks.capability, lacks.reason)
        else:
            not_applicable = lacks.not_applicable
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0,
                               f"Skipped: {not_applicable}")
    unjudged = (report.failed and call.excinfo is not None
                and call.excinfo.errisinstance((ComponentStartError, PreconditionUnestablished)))
    if report.failed:
        show_failure_logs(item, report)
        _show_rdma_replay(item, report)
        if report.when == "call" and not unjudged:
            _mark_counterexample(item, report)
    elif report.passed and report.when == "call":
        attach_passing_logs(item)
    label = target_for(item).label
    label_report(report, requirement_ids(item), label, skew_pair_id(item), not_applicable,
                 unjudged, pair_only=not skew_pair_involves_target(item, label))


def _mark_counterexample(item: pytest.Item, report: pytest.TestReport) -> None:
    """A test that failed after seeing the build break an invariant under a recorded
    interleaving found a counterexample: its report carries the first such token (FAIL,
    whatever a re-run shows; ``verdict_rule``)."""
    tokens = item.stash.get(REPLAY_TOKENS, [])
    if tokens:
        report.user_properties.append((COUNTEREXAMPLE_PROPERTY, tokens[0]))


def _show_rdma_replay(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed test that saw violating RDMA schedules: the command replaying each and the
    schedule's trace, as report sections (the trace's tail) and allure attachments (whole)."""
    mc = item.config.stash[MC_CONFIG]
    matrix = mc.matrix if len(item.config.stash[MC_TARGETS]) > 1 else None
    for title, text in replay_sections(item, target_for(item).label, mc.seed, matrix):
        report.sections.append((title, tail(text)))
        attach_text(item.config, title, text)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[PREEXISTING_PROCESSES] = owned_before()
    if not hasattr(session.config, "workerinput"):
        sweep_stale_claims()  # port claims a SIGKILLed run left behind
        sweep_abandoned_data_dirs()  # and its etcd data directories (64 MB each)
        mc = session.config.stash[MC_CONFIG]
        add_run_properties(session.config, mc.seed, mc.matrix, _column_facts(session.config))


def pytest_sessionfinish(session: pytest.Session) -> None:
    reap_leaks(session, session.config.stash.get(PREEXISTING_PROCESSES, set()))
    directory = allure_results_dir(session.config)
    if directory and not hasattr(session.config, "workerinput"):
        mc = session.config.stash[MC_CONFIG]
        write_run_files(directory, environment(_column_facts(session.config), mc.seed,
                                               mc.matrix, etcd_version(mc.etcd), mc.verbs))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    directory = allure_results_dir(config)
    if directory:
        terminalreporter.write_line(
            f"allure results in {directory}; grouped by RFC and requirement with Allure 3: "
            f"npx allure generate {directory} --config {ALLURERC}")


atexit.register(reap_all)
