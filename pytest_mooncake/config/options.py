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

from pytest_mooncake.report.ci_contract import FailOn, parse_fail_on
from pytest_mooncake.targets import known_targets_text


@dataclass(frozen=True)
class Option:
    name: str
    default: str
    help: str
    metavar: str = "VALUE"

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
    Option("fail_on", "never", "exit with status 6 when the run judged too little: nothing (a "
           "target judged no requirement), na (any requirement n/a) or na:ID,... (one of these "
           "n/a or not run); e.g. --mc-fail-on=na. Default: never.",
           "nothing|na|na:ID,..."),
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
    only: tuple[str, ...] = ()
    fail_on: FailOn = field(default_factory=FailOn)
    """What the run must have judged (``report/ci_contract.py``)."""
    raw: dict[str, str] = field(default_factory=dict, compare=False)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("mooncake", "Mooncake conformance and chaos testing")
    for opt in OPTIONS:
        group.addoption(opt.flag, dest="mc_" + opt.name, default=None, metavar=opt.metavar,
                        help=opt.help)
        parser.addini(opt.ini, help=opt.help, default=opt.default)


def raw_values(config: pytest.Config) -> dict[str, str]:
    values = {}
    for opt in OPTIONS:
        cli = config.getoption("mc_" + opt.name)
        values[opt.name] = str(cli if cli is not None else config.getini(opt.ini) or opt.default)
    return values


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n <= 0:
        raise pytest.UsageError(f"--mc-{name} must be a positive integer (got {value!r})")
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
        only=tuple(x.strip().upper() for x in raw["only"].split(",") if x.strip()),
        fail_on=parse_fail_on(raw.get("fail_on", "never")),
        raw=dict(raw),
    )
