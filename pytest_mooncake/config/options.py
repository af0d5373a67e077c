"""Every command-line option of the plugin, in one place, each mirrored by an ini key.

The command line wins over the ini file; both win over the default. ``resolve`` turns the raw
values into a frozen ``McConfig`` and raises ``pytest.UsageError`` with a one-line message for
a bad value.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_mooncake.config import compute_slots
from pytest_mooncake.report.ci_contract import FailOn, parse_fail_on
from pytest_mooncake.targets import known_targets_text


@dataclass(frozen=True)
class Option:
    name: str
    default: str
    help: str
    metavar: str = "VALUE"
    switch: bool = False
    """A flag without a value (``--mc-expect-strict``); its ini key takes true/false."""

    @property
    def flag(self) -> str:
        return "--mc-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "mc_" + self.name


OPTIONS: tuple[Option, ...] = (
    Option("target", "reference", "implementation under test. Default: reference. Known: "
           + known_targets_text() + ".", "NAME[:VARIANT]"),
    Option("etcd", "", "comma-separated host:port of an existing etcd cluster to use (never "
           "stopped by the plugin). Default: start one etcd per xdist worker.", "HOST:PORT,..."),
    Option("redis", "", "host:port of an existing Redis to use (never stopped by the plugin; no "
           "password, database 0). Default: start one redis-server per xdist worker when a "
           "test asks for Redis.", "HOST:PORT"),
    Option("metadata", "etcd", "the transfer-engine metadata backend of the deployment: etcd, "
           "redis (redis://HOST:PORT, Mooncake's Redis plugin), http (the target's own HTTP "
           "metadata server: for real builds the wheel's mooncake.http_metadata_server) or "
           "http:reference (the reference engine's HTTP metadata server, for any target) or "
           "p2p (P2PHANDSHAKE: no store, peers exchange descriptors on their RPC port; "
           "segments are named host:port). Tests that name their store keep it. Default: etcd.",
           "etcd|redis|http|http:reference|p2p"),
    Option("ha", "etcd", "the backend of master HA (leader election, OpLog where the release "
           "keeps it there): etcd or redis (mooncake_master --ha_backend_type). Default: etcd.",
           "etcd|redis"),
    Option("toxiproxy", "", "base URL of a real Toxiproxy server for network faults. Default: "
           "start the plugin's embedded Toxiproxy-compatible server.", "URL"),
    Option("seed", "", "integer seed driving every random choice (workloads, faults, "
           "schedules). Default: random, printed in the header.", "INT"),
    Option("report", "", "write the conformance matrix as JSON to this file.", "FILE.json"),
    Option("verbs", "auto", "verbs layer of the RDMA path. The reference target: sim (its "
           "simulated verbs) or pyverbs:DEVICE (rdma-core's pyverbs on a device this process "
           "sees, also an emulated one). Real builds (mooncake target): emulated[:DEVICES] (the "
           "plugin's emulated libibverbs; completions the tests control; DEVICES like "
           "mlx5_0,mlx5_1) or host (this host's RDMA devices: no completion control). Default: "
           "auto = sim for the reference; for real builds emulated where this host has no RDMA "
           "device (/sys/class/infiniband empty), else host.",
           "auto|sim|emulated[:DEVICES]|host|pyverbs:DEVICE"),
    Option("schedules", "200", "schedules to explore per controlled-scheduler scenario. "
           "Default: 200 (on a real build, explored at its verbs calls: 40, one transfer "
           "each).", "N"),
    Option("strategy", "mix", "scheduling strategy for explorations: mix (PCT and random walk "
           "alternately), pct or random. Default: mix.", "mix|pct|random"),
    Option("replay", "", "replay token printed by a failing exploration; runs exactly that "
           "schedule.", "TOKEN"),
    Option("matrix", "", "run the suites over several targets in one session: a TOML file "
           "listing [[column]] target = \"...\" entries, or the name of a shipped one "
           "(reference-profiles, release) or of the project's fixtures/matrices/NAME.toml; "
           "the matrix gets a column per target. Overrides --mc-target.", "FILE.toml|NAME"),
    Option("only", "", "run only the tests that name one of these requirements (comma-separated "
           "IDs, e.g. MR-3,CO-4); the others are deselected. Default: all.", "ID,..."),
    Option("chaos_seconds", "10", "length of each nemesis (chaos) run in seconds. Default: 10.",
           "SECONDS"),
    Option("fail_on", "never", "exit with status 6 when the run judged too little or "
           "unstably: nothing (a target judged no requirement), na (any requirement n/a), "
           "na:ID,... (one of these n/a or not run) or intermittent (any requirement "
           "intermittent); several joined with +, e.g. --mc-fail-on=na+intermittent. "
           "Default: never.", "nothing|na|na:ID,...|intermittent"),
    Option("confirm", "2", "re-run each failed requirement test up to N times before its "
           "requirement stays FAIL: first with the run's seed, then with seeds drawn from it, "
           "each in a fresh pytest session; a test seen both failing and passing makes its "
           "requirement intermittent (k/N). 0: no re-runs. Default: 2.", "N"),
    Option("confirm_only", "all", "which failed tests --mc-confirm re-runs: all; "
           "deviations (needs --mc-expect): only those whose FAIL the expectations do not "
           "expect, a known FAIL keeping its one run; or witnesses: first the quickest failed "
           "test of each failed cell, then the other failed tests of the cells whose witness "
           "did not fail every time (the same requirement verdicts as all). Tests left alone "
           "are recorded in the report's reruns.not_rerun (docs/speed.md). Default: all.",
           "all|deviations|witnesses"),
    Option("expect", "", "compare the verdicts with an expectations file (TOML; a path, or the "
           "name of a shipped one such as mooncake-0.3.13.post1@ha-oplog or of the project's "
           "fixtures/expectations/NAME.toml): exit 0 when every result is as expected, 1 on a "
           "regression or other change (docs/ci.md). Default: none (pytest's exit status).",
           "FILE.toml|NAME"),
    Option("durations", "auto", "run the longest tests first, by the per-test durations of a "
           "--mc-report JSON or a durations table, so xdist workers stay busy to the end "
           "(with xdist sending one test at a time unless --maxschedchunk is given); none: "
           "pytest's order. Default: auto = the table the package ships, used only with xdist "
           "workers (-n N).", "auto|none|FILE.json"),
    Option("compute_slots", "auto", "with xdist, how many tests that compute (the RDMA "
           "explorations: tests needing the controlled scheduler) may run at once: a worker "
           "waits for a free slot before such a test, and the scheduler sends one only while a "
           "slot is free, so more workers than cores overlap the suites' waits without "
           "starving the explorations (docs/speed.md). auto: as many as the machine has cores, "
           "only when -n asks for more workers than cores; off: no limit. Default: auto.",
           "auto|off|N"),
    Option("fork_server", "auto", "how the reference target starts its Python processes "
           "(engines, masters, store clients, metadata servers): auto forks each from a "
           "server per test process that imported their modules once (a fresh interpreter's "
           "start and imports, 0.2-0.4 s of CPU each, saved; docs/speed.md), falling back to a "
           "new interpreter for anything it cannot run the same way; off starts each as a new "
           "interpreter. Real builds are never forked. Default: auto.", "auto|off"),
    Option("expect_strict", "false", "with --mc-expect, an unexpected pass (a FAIL fixed) also "
           "fails the run. Default: false.", switch=True),
    Option("expect_update", "false", "with --mc-expect, write the run's verdicts into the "
           "expectations file(s), keeping reasons (a shipped file is written to the project's "
           "fixtures/expectations/). Default: false.", switch=True),
)


@dataclass(frozen=True)
class McConfig:
    target: str
    etcd: tuple[str, ...]
    toxiproxy: str | None
    seed: int
    seed_was_given: bool
    report: str | None
    verbs: str
    schedules: int
    strategy: str
    replay: str | None
    chaos_seconds: float
    matrix: str | None = None
    redis: str | None = None
    metadata: str = "etcd"
    """The deployment's metadata backend (``--mc-metadata``)."""
    ha: str = "etcd"
    """The deployment's master HA backend (``--mc-ha``)."""
    only: tuple[str, ...] = ()
    fail_on: FailOn = field(default_factory=FailOn)
    """What the run must have judged (``report/ci_contract.py``)."""
    confirm: int = 2
    """Re-runs of each failed requirement test (``report/confirmation_runs.py``); 0: none."""
    expect: str | None = None
    expect_strict: bool = False
    expect_update: bool = False
    durations: str = "auto"
    """Where the test order comes from (``config/longest_first.py``): auto, none or a file."""
    confirm_only: str = "all"
    """Which failed tests are re-run (``report/expected_failures.py``): all or deviations."""
    fork_server: str = "auto"
    """``auto``: the reference's Python processes fork from a server (runtime/fork_server.py)."""
    compute_slots: str = "auto"
    """How many computing tests run at once under xdist (``config/compute_slots.py``)."""
    raw: dict[str, str] = field(default_factory=dict, compare=False)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("mooncake", "Mooncake conformance and chaos testing")
    for opt in OPTIONS:
        if opt.switch:
            group.addoption(opt.flag, dest="mc_" + opt.name, default=None, action="store_true",
                            help=opt.help)
        else:
            group.addoption(opt.flag, dest="mc_" + opt.name, default=None, metavar=opt.metavar,
                            help=opt.help)
        parser.addini(opt.ini, help=opt.help, default=opt.default)


def raw_values(config: pytest.Config) -> dict[str, str]:
    values = {}
    for opt in OPTIONS:
        cli = config.getoption("mc_" + opt.name)
        values[opt.name] = str(cli if cli is not None else config.getini(opt.ini) or opt.default)
    return values


def _switch(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise pytest.UsageError(f"mc_{name} must be true or false (got {value!r})")


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n <= 0:
        raise pytest.UsageError(f"--mc-{name} must be a positive integer (got {value!r})")
    return n


METADATA_BACKENDS = ("etcd", "redis", "http", "http:reference", "p2p")
HA_BACKENDS = ("etcd", "redis")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    chosen = value.strip().lower() or allowed[0]
    if chosen not in allowed:
        raise pytest.UsageError(
            f"--mc-{name} must be one of {', '.join(allowed)} (got {value!r})")
    return chosen


def _hostport(name: str, value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise pytest.UsageError(
            f"--mc-{name} takes host:port (got {value!r}); e.g. --mc-{name}=127.0.0.1:6379")
    return value


def _non_negative_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise pytest.UsageError(f"--mc-{name} must be an integer >= 0 (got {value!r}); 0 "
                                f"turns it off")
    return n


def _hostports(value: str) -> tuple[str, ...]:
    out = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise pytest.UsageError(
                f"--mc-etcd takes comma-separated host:port (got {part!r}); "
                f"e.g. --mc-etcd=127.0.0.1:2379"
            )
        out.append(part)
    return tuple(out)


VERBS_HELP = ("auto, sim, host, emulated, emulated:DEVICES (e.g. emulated:mlx5_0,mlx5_1) or "
              "pyverbs:DEVICE (e.g. pyverbs:mlx5_0)")


def _verbs(value: str) -> str:
    kind, colon, rest = value.partition(":")
    if value in ("auto", "sim", "host", "emulated") or (kind == "pyverbs" and rest):
        return value
    if kind == "emulated" and colon:
        from pytest_mooncake.verbs import DeviceSpecError, parse_devices

        try:
            parse_devices(rest)
        except DeviceSpecError as exc:
            raise pytest.UsageError(f"--mc-verbs={value}: {exc}") from None
        return value
    raise pytest.UsageError(f"--mc-verbs must be one of {VERBS_HELP} (got {value!r})")


def _confirm_only(value: str, expect: str | None) -> str:
    chosen = _choice("confirm_only", value, ("all", "deviations", "witnesses"))
    if chosen == "deviations" and not expect:
        raise pytest.UsageError("--mc-confirm-only=deviations needs --mc-expect=FILE|NAME (the "
                                "expectations say which FAILs are known)")
    return chosen


def resolve(raw: dict[str, str], inherited_seed: Any = None) -> McConfig:
    seed_text = raw["seed"].strip()
    if inherited_seed is not None:
        seed, given = int(inherited_seed), bool(seed_text)
    elif seed_text:
        try:
            seed = int(seed_text, 0)
        except ValueError:
            raise pytest.UsageError(
                f"--mc-seed must be an integer (got {seed_text!r}); omit it for a random seed"
            ) from None
        if seed < 0:
            raise pytest.UsageError(f"--mc-seed must be >= 0 (got {seed})")
        given = True
    else:
        seed, given = secrets.randbelow(2**32), False
    strategy = raw["strategy"].strip().lower()
    if strategy not in ("mix", "pct", "random"):
        raise pytest.UsageError(
            f"--mc-strategy must be mix, pct or random (got {raw['strategy']!r})")
    verbs = _verbs(raw["verbs"].strip() or "auto")
    try:
        chaos = float(raw["chaos_seconds"])
        if chaos <= 0:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(
            f"--mc-chaos-seconds must be a positive number (got {raw['chaos_seconds']!r})"
        ) from None
    toxi = raw["toxiproxy"].strip().rstrip("/") or None
    if toxi and not toxi.startswith(("http://", "https://")):
        raise pytest.UsageError(
            f"--mc-toxiproxy must be a URL like http://127.0.0.1:8474 (got {toxi!r})"
        )
    expect = raw.get("expect", "").strip() or None
    for name in ("expect_strict", "expect_update"):
        if not expect and _switch(name, raw.get(name, "false")):
            raise pytest.UsageError(f"--mc-{name.replace('_', '-')} needs --mc-expect=FILE|NAME")
    return McConfig(
        target=raw["target"].strip() or "reference",
        etcd=_hostports(raw["etcd"]),
        toxiproxy=toxi,
        seed=seed,
        seed_was_given=given,
        report=raw["report"].strip() or None,
        verbs=verbs,
        schedules=_positive_int("schedules", raw["schedules"]),
        strategy=strategy,
        replay=raw["replay"].strip() or None,
        chaos_seconds=chaos,
        matrix=raw["matrix"].strip() or None,
        redis=_hostport("redis", raw.get("redis", "")),
        metadata=_choice("metadata", raw.get("metadata", ""), METADATA_BACKENDS),
        ha=_choice("ha", raw.get("ha", ""), HA_BACKENDS),
        only=tuple(x.strip().upper() for x in raw["only"].split(",") if x.strip()),
        fail_on=parse_fail_on(raw.get("fail_on", "never")),
        confirm=_non_negative_int("confirm", raw.get("confirm", "2").strip()),
        expect=expect,
        expect_strict=_switch("expect_strict", raw.get("expect_strict", "false")),
        expect_update=_switch("expect_update", raw.get("expect_update", "false")),
        durations=raw.get("durations", "auto").strip() or "auto",
        confirm_only=_confirm_only(raw.get("confirm_only", "all"), expect),
        fork_server=_choice("fork_server", raw.get("fork_server", ""), ("auto", "off")),
        compute_slots=compute_slots.parse(raw.get("compute_slots", "auto")),
        raw=dict(raw),
    )
