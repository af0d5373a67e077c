"""pytest hooks of pytest-mooncake: options, markers, target selection, seed, matrix, report."""

from __future__ import annotations

import atexit
import random
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake import options as mc_options
from pytest_mooncake.catalogue import load_catalogue
from pytest_mooncake.logs import attach_log, logs_for, tail
from pytest_mooncake.matrix import ConformanceMatrix, load_matrix_columns
from pytest_mooncake.processes import Supervisor, live_processes, reap_all
from pytest_mooncake.targets import Capability, Target, TargetContext, TargetLacks, UnknownTarget
from pytest_mooncake.targets import resolve_target as _resolve_target

MC_CONFIG = pytest.StashKey["mc_options.McConfig"]()
MC_TARGET = pytest.StashKey[Target]()
MC_TARGETS = pytest.StashKey[dict[str, Target]]()
MC_MATRIX = pytest.StashKey[ConformanceMatrix]()

NA_PREFIX = "n/a: "
REQ_PROPERTY = "mc_req"
COLUMN_PROPERTY = "mc_column"
PAIR_PROPERTY = "mc_skew_pair"


def pytest_addoption(parser: pytest.Parser) -> None:
    mc_options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mc_req(*IDS): the requirement(s) of the catalogue this test checks (e.g. 'MR-3'); "
        "keys the conformance matrix",
    )
    config.addinivalue_line(
        "markers",
        "mc_requires(*CAPABILITIES): means the target must have; otherwise the test is n/a "
        "with the target's reason. Capabilities: "
        + ", ".join(c.value for c in Capability),
    )
    # etcd3 0.12's generated protobuf modules use APIs protobuf 3.20 deprecates: noise, not news.
    config.addinivalue_line(
        "filterwarnings", "ignore:Call to deprecated create function:DeprecationWarning"
    )
    inherited = getattr(config, "workerinput", {}).get("mc_seed")
    mc_config = mc_options.resolve(mc_options.raw_values(config), inherited_seed=inherited)
    if mc_config.matrix:
        specs = load_matrix_columns(mc_config.matrix, config.rootpath)
        where = f"--mc-matrix={mc_config.matrix}"
    else:
        specs, where = [mc_config.target], "--mc-target"
    targets: dict[str, Target] = {}
    for spec in specs:
        try:
            target = _resolve_target(spec)
        except UnknownTarget as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
        targets.setdefault(target.label, target)
    config.stash[MC_CONFIG] = mc_config
    config.stash[MC_TARGETS] = targets
    config.stash[MC_TARGET] = next(iter(targets.values()))
    matrix = ConformanceMatrix(load_catalogue())
    for label in targets:
        matrix.add_column(label)
    config.stash[MC_MATRIX] = matrix
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "mooncake-xdist")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_MatrixRecorder(config), "mooncake-matrix")


class _XdistHooks:
    """Hands the controller's seed to every worker so all of them draw from one seed."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["mc_seed"] = node.config.stash[MC_CONFIG].seed


def target_for(item: pytest.Item) -> Target:
    """The target a test runs against: its matrix column, or the session's one target."""
    callspec = getattr(item, "callspec", None)
    label = callspec.params.get("mc_target") if callspec is not None else None
    targets = item.config.stash[MC_TARGETS]
    return targets[label] if label in targets else item.config.stash[MC_TARGET]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    targets = metafunc.config.stash[MC_TARGETS]
    if len(targets) > 1 and "mc_target" in metafunc.fixturenames:
        labels = list(targets)
        metafunc.parametrize("mc_target", labels, indirect=True, scope="session", ids=labels)


def pytest_report_header(config: pytest.Config) -> list[str]:
    mc = config.stash[MC_CONFIG]
    targets = config.stash[MC_TARGETS]
    if len(targets) > 1:
        lines = [f"mooncake: matrix {mc.matrix}: " + ", ".join(
            f"{t.label} ({t.version})" for t in targets.values())]
        lines.append(f"mooncake: seed={mc.seed}")
        return lines
    target = config.stash[MC_TARGET]
    etcd = ",".join(mc.etcd) if mc.etcd else "start one per worker"
    toxi = mc.toxiproxy or "embedded Toxiproxy-compatible server"
    seed_note = "" if mc.seed_was_given else f" (random; rerun with --mc-seed={mc.seed})"
    return [
        f"mooncake: target={target.label} ({target.version}) seed={mc.seed}{seed_note}",
        f"mooncake: etcd={etcd} toxiproxy={toxi} verbs={mc.verbs}",
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Validate the markers, make requirement IDs ``-k`` keywords (before ``-k`` deselects),
    and apply ``--mc-only``."""
    catalogue = load_catalogue()
    problems = []
    for item in items:
        for mark in item.iter_markers("mc_req"):
            if not mark.args:
                problems.append(f"{item.nodeid}: mc_req needs at least one requirement ID")
            for req in mark.args:
                if not isinstance(req, str) or req not in catalogue:
                    hint = catalogue.suggest(str(req))
                    problems.append(f"{item.nodeid}: unknown requirement {req!r} in mc_req ({hint})")
                    continue
                item.extra_keyword_matches.add(req)
                fam = catalogue.families[catalogue[req].family]
                item.add_marker(pytest.mark.allure_label(f"{fam.id}: {fam.name}", label_type="epic"))
                item.add_marker(pytest.mark.allure_label(req, label_type="feature"))
        for mark in item.iter_markers("mc_requires"):
            for cap in mark.args:
                try:
                    Capability(cap)
                except ValueError:
                    known = ", ".join(c.value for c in Capability)
                    problems.append(
                        f"{item.nodeid}: unknown capability {cap!r} in mc_requires (known: {known})"
                    )
    if problems:
        raise pytest.UsageError("mooncake markers:\n  " + "\n  ".join(problems))
    only = config.stash[MC_CONFIG].only
    if only:
        unknown = [r for r in only if r not in catalogue]
        if unknown:
            raise pytest.UsageError(f"--mc-only: unknown requirement(s) {', '.join(unknown)} "
                                    f"({catalogue.suggest(unknown[0])})")
        keep = [i for i in items if set(_req_ids(i)) & set(only)]
        drop = [i for i in items if not set(_req_ids(i)) & set(only)]
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def _req_ids(item: pytest.Item) -> list[str]:
    seen: list[str] = []
    for mark in item.iter_markers("mc_req"):
        seen.extend(r for r in mark.args if r not in seen)
    return seen


def pytest_runtest_setup(item: pytest.Item) -> None:
    target = target_for(item)
    for mark in item.iter_markers("mc_requires"):
        for cap in mark.args:
            reason = target.missing(cap)
            if reason:
                pytest.skip(f"{NA_PREFIX}{reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(TargetLacks):
        exc: TargetLacks = call.excinfo.value
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {NA_PREFIX}{exc.reason}")
    if report.failed:
        _attach_logs(item, report)
    # Every phase report carries its own copy, so the controller can fold each one.
    for req in _req_ids(item):
        report.user_properties.append((REQ_PROPERTY, req))
    report.user_properties.append((COLUMN_PROPERTY, target_for(item).label))
    pair = _skew_pair_id(item)
    if pair:
        report.user_properties.append((PAIR_PROPERTY, pair))


def _skew_pair_id(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    pair = callspec.params.get("mc_skew") if callspec is not None else None
    return getattr(pair, "id", None)


def _skip_reason(report: pytest.TestReport) -> str | None:
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        text = str(report.longrepr[2])
        return text.removeprefix("Skipped: ").removeprefix(NA_PREFIX)
    return None


MESSAGE_LIMIT = 600


def _failure_message(report: pytest.TestReport) -> str | None:
    """The exception message of a failed phase (what the JSON report says went wrong)."""
    if not report.failed:
        return None
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    text = text.strip()
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def _attach_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    logs = logs_for(item)
    allure = _allure_if_active(item.config)
    for title, text in logs:
        report.sections.append((f"Captured {title}", tail(text)))
        if allure is not None:
            try:
                allure.attach(text, name=title, attachment_type=allure.attachment_type.TEXT)
            except Exception:  # allure's listener may already have closed the test
                pass


def _allure_if_active(config: pytest.Config) -> Any:
    if not config.pluginmanager.hasplugin("allure_pytest") or not config.getoption(
        "allure_report_dir", None
    ):
        return None
    import allure

    return allure


PREEXISTING = pytest.StashKey[set[int]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    # A nested run (pytester inline) must not reap what the outer session owns.
    session.config.stash[PREEXISTING] = {id(p) for p in live_processes()}


def pytest_sessionfinish(session: pytest.Session) -> None:
    outer = session.config.stash.get(PREEXISTING, set())
    leaked = [p for p in live_processes() if id(p) not in outer]
    for proc in leaked:
        proc.kill()
    if not leaked:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for proc in leaked:
        line = (f"mooncake: {proc.name} (pid {proc.pid}: {' '.join(proc.argv)[:120]}) was still "
                f"alive at session end (a teardown leak); killed it")
        if reporter is not None:
            reporter.write_line("ERROR " + line, red=True)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


atexit.register(reap_all)


class _MatrixRecorder:
    """Folds test reports into the matrix and prints it; on the controller only (under xdist,
    worker reports reach the controller with their user_properties)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        reqs = [v for k, v in report.user_properties if k == REQ_PROPERTY]
        if not reqs:
            return
        column = next((v for k, v in report.user_properties if k == COLUMN_PROPERTY),
                      self.config.stash[MC_TARGET].label)
        reason = _skip_reason(report) if report.skipped else None
        pair = next((v for k, v in report.user_properties if k == PAIR_PROPERTY), None)
        self.config.stash[MC_MATRIX].record(
            reqs, column, report.nodeid, report.when, report.outcome, reason,
            _failure_message(report), pair
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        config = self.config
        mc = config.stash[MC_CONFIG]
        matrix = config.stash[MC_MATRIX]
        target = config.stash[MC_TARGET]
        terminalreporter.section("mooncake conformance matrix")
        targets = config.stash[MC_TARGETS]
        if len(targets) > 1:
            header = [f"matrix: {mc.matrix}    seed: {mc.seed}"] + [
                f"  {t.label}: {t.version}" for t in targets.values()]
        else:
            header = [f"target: {target.label} ({target.version})    seed: {mc.seed}"]
        for line in matrix.render(header):
            terminalreporter.write_line(line)
        if mc.report:
            matrix.write_json(mc.report, mc.seed)
            terminalreporter.write_line(f"JSON report written to {mc.report}")


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def mc_config(pytestconfig: pytest.Config) -> mc_options.McConfig:
    """The resolved plugin options (target, etcd, toxiproxy, seed, ...)."""
    return pytestconfig.stash[MC_CONFIG]


@pytest.fixture(scope="session")
def mc_target(
    request: pytest.FixtureRequest, mc_config: mc_options.McConfig,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Target]:
    """The implementation under test, opened for this session (one per xdist worker); under
    ``--mc-matrix`` parametrized over the matrix's targets."""
    targets = request.config.stash[MC_TARGETS]
    target = targets.get(getattr(request, "param", None), request.config.stash[MC_TARGET])

    def etcd_endpoints() -> list[str]:
        return list(request.getfixturevalue("mc_etcd").endpoints)

    ctx = TargetContext(
        seed=mc_config.seed,
        workdir=tmp_path_factory.mktemp("mc-target-" + re.sub(r"[^A-Za-z0-9_.-]+", "-",
                                                                target.label)),
        etcd_endpoints=etcd_endpoints,
        options=dict(mc_config.raw),
    )
    target.open(ctx)
    try:
        yield target
    finally:
        target.close()


@pytest.fixture
def mc_seed(request: pytest.FixtureRequest, mc_config: mc_options.McConfig) -> int:
    """This test's seed: the session seed mixed with the test id, so it does not depend on
    test order or on which xdist worker runs the test."""
    return (mc_config.seed + zlib.crc32(request.node.nodeid.encode())) % 2**32


@pytest.fixture
def mc_rng(mc_seed: int) -> random.Random:
    """A random generator seeded with ``mc_seed``; use it for every random choice in a test."""
    return random.Random(mc_seed)


@pytest.fixture
def mc_processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Supervisor]:
    """A process supervisor for this test: every process it starts is stopped and reaped when
    the test ends (pass or fail), and their logs are shown if the test fails."""
    supervisor = Supervisor(tmp_path / "logs", name=request.node.name)

    def all_logs() -> str:
        return "\n".join(f"== {p.name} ({p.log_path})\n{p.log_tail()}"
                         for p in supervisor.processes)

    attach_log(request, "process logs", all_logs)
    yield supervisor
    supervisor.stop_all()


@pytest.fixture(autouse=True)
def _mc_allure_target(request: pytest.FixtureRequest) -> None:
    """Allure groups results by parameters: give every requirement test its target."""
    item = request.node
    if not isinstance(item, pytest.Item) or not _req_ids(item):
        return
    allure = _allure_if_active(item.config)
    if allure is not None:
        allure.dynamic.parameter("target", target_for(item).label)
