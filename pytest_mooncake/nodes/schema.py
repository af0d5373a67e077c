"""The node part of a cluster file, as pydantic models (to be merged into the cluster file schema).

A cluster file (``--mc-target=cluster:FILE``) describes a deployment. This module reads the
tables that say how to *drive* it over SSH; the tables the cluster target already reads
(``[cluster]``, ``[etcd]``, ``[[masters]]``, ``[[engines]]``, ``[toxiproxy]``) are left to it,
except for the one link key each entry gains (``component = NAME``)::

    [[nodes]]
    name = "n1"                   # how components and faults refer to the node
    host = "198.18.0.2"           # SSH host
    port = 22
    user = "root"
    key = "/path/id_ed25519"      # private key (else the agent / default keys)
    known_hosts = "/path/known_hosts"   # host keys to trust (else ~/.ssh/known_hosts)
    sudo = false                  # prefix remote commands with `sudo -n`
    address = "198.18.0.2"        # where peers reach this node (partitions match it); default: host
    run_dir = "/tmp/mooncake-nodes"     # remote dir for the pid files and logs we create

    [[components]]
    name = "engine-n1"            # unique in the file
    kind = "engine"               # etcd | master | engine | client | other
    node = "n1"
    start = "exec python -m reference_engine engine --name seg-n1 ..."  # or: unit = "x.service"
    env = { MC_TCP_BIND_ADDRESS = "198.18.0.2" }
    pid_file = "/run/x.pid"       # default for `start`: <run_dir>/<name>.pid (written by us)
    match = "reference_engine engine --name seg-n1"  # regex on the command line: finds it without a pid file
    log = "/var/log/x.log"        # default for `start`: <run_dir>/<name>.log; for `unit`: journalctl
    ready_log = '"event": "ready"'  # text whose appearance in the new log output means started
    ready_tcp = "198.18.0.2:7000" # or: a port that accepts connections once started
    stop_timeout = 10             # SIGTERM, then SIGKILL after this many seconds

    [[engines]]                   # the cluster target's table, plus:
    component = "engine-n1"       # restart/kill/pause this engine through that component

    [faults]
    allow = ["observe", "transfers", "logs", "restart", "kill:engine", "pause", "partition"]
    ledger = "cluster.toml.ledger"  # default: the cluster file's path + ".ledger"
    firewall = "auto"             # auto | nft | iptables | link (the lab's `ip link` fallback)

Node-control permissions, each alone (every kind) or as ``ACTION:KIND``: ``logs``, ``restart``
(SIGTERM stop and start), ``kill`` (SIGKILL), ``pause`` (SIGSTOP/SIGCONT), ``partition``.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_mooncake.nodes.node_errors import NodesFileError

KINDS = ("etcd", "master", "engine", "client", "other")
#: permissions the node layer adds to the cluster target's [faults].allow vocabulary
ACTIONS = ("logs", "restart", "kill", "pause", "partition")
#: the cluster target's own permissions (pytest_mooncake/targets/cluster.py), accepted unchanged
TARGET_PERMISSIONS = ("observe", "transfers", "metadata_writes", "metadata_faults")
FIREWALLS = ("auto", "nft", "iptables", "link")

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_LINK = r"^[A-Za-z0-9_.-]{1,15}$"


def _absolute_posix(value: str | None, what: str) -> str | None:
    if value is not None and not PurePosixPath(value).is_absolute():
        raise ValueError(f"{what} must be an absolute path on the node, got {value!r}")
    return value


class NodeSpec(BaseModel):
    """One machine reachable over SSH."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    host: str = Field(min_length=1)
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("root", min_length=1)
    key: Path | None = None
    known_hosts: Path | None = None
    sudo: bool = False
    address: str | None = None
    run_dir: str = "/tmp/mooncake-nodes"
    lab_link: str | None = Field(None, pattern=_LINK)
    connect_timeout: float = Field(10.0, gt=0, le=600)
    command_timeout: float = Field(30.0, gt=0, le=3600)

    @field_validator("key", "known_hosts")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("address")
    @classmethod
    def _ip(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)  # raises ValueError naming the text
        return value

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, value: str) -> str:
        return _absolute_posix(value, "run_dir") or value

    @property
    def peer_address(self) -> str | None:
        """The IP other nodes reach this node at: ``address``, else ``host`` when it is an IP."""
        if self.address:
            return self.address
        try:
            return str(ipaddress.ip_address(self.host))
        except ValueError:
            return None

    def describe(self) -> str:
        return f"{self.name} ({self.user}@{self.host}:{self.port})"


class ComponentSpec(BaseModel):
    """One process on one node, and how to start, find, stop and read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    kind: Literal["etcd", "master", "engine", "client", "other"]
    node: str
    start: str | None = None
    unit: str | None = Field(None, pattern=r"^[A-Za-z0-9@_.:\\-]+$")
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    pid_file: str | None = None
    match: str | None = None
    log: str | None = None
    ready_log: str | None = None
    ready_tcp: str | None = None
    start_timeout: float = Field(30.0, gt=0, le=3600)
    stop_timeout: float = Field(10.0, gt=0, le=3600)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
        if bad:
            raise ValueError(f"not an environment variable name: {', '.join(bad)}")
        return value

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {value!r}") from None
        return value

    @field_validator("cwd", "pid_file", "log")
    @classmethod
    def _paths(cls, value: str | None, info: Any) -> str | None:
        return _absolute_posix(value, info.field_name)

    @field_validator("ready_tcp")
    @classmethod
    def _hostport(cls, value: str | None) -> str | None:
        if value is not None:
            host, _, port = value.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected HOST:PORT, got {value!r}")
        return value

    @model_validator(mode="after")
    def _how_to_start(self) -> ComponentSpec:
        if (self.start is None) == (self.unit is None):
            raise ValueError("give exactly one of `start` (a command line) or `unit` "
                             "(a systemd unit)")
        if self.unit is not None and (self.cwd or self.env):
            raise ValueError("cwd and env belong in the systemd unit, not beside `unit`")
        return self

    def pid_path(self, node: NodeSpec) -> str | None:
        """Where the pid lives: the given pid file, or ours for a `start` component."""
        if self.pid_file:
            return self.pid_file
        return f"{node.run_dir}/{self.name}.pid" if self.start is not None else None

    def log_path(self, node: NodeSpec) -> str | None:
        if self.log:
            return self.log
        return f"{node.run_dir}/{self.name}.log" if self.start is not None else None


def _permission(value: str) -> str:
    if value in TARGET_PERMISSIONS or value in ACTIONS:
        return value
    action, sep, kind = value.partition(":")
    if sep and action in ACTIONS and kind in KINDS:
        return value
    raise ValueError(f"unknown permission {value!r} (known: "
                     f"{', '.join(TARGET_PERMISSIONS + ACTIONS)}; node actions may name a kind, "
                     f"e.g. kill:engine; kinds: {', '.join(KINDS)})")


Permission = Annotated[str, AfterValidator(_permission)]


class FaultsSpec(BaseModel):
    """``[faults]``: what this run may do to the deployment (operator opt-in per fault)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: tuple[Permission, ...] = ("observe",)
    ledger: Path | None = None
    firewall: Literal["auto", "nft", "iptables", "link"] = "auto"

    def permits(self, action: str, kind: str | None = None) -> bool:
        return action in self.allow or (kind is not None and f"{action}:{kind}" in self.allow)


class _Link(BaseModel):
    """An entry of the cluster target's tables, read only for its ``component`` link."""

    model_config = ConfigDict(extra="allow", frozen=True)

    component: str | None = None


class _EtcdLink(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    components: tuple[str, ...] = ()


class NodesFile(BaseModel):
    """The node part of a cluster file. Other top-level tables are ignored here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    path: Path
    nodes: tuple[NodeSpec, ...] = ()
    components: tuple[ComponentSpec, ...] = ()
    faults: FaultsSpec = FaultsSpec()
    engines: tuple[_Link, ...] = ()
    masters: tuple[_Link, ...] = ()
    etcd: _EtcdLink = _EtcdLink()

    @model_validator(mode="after")
    def _references(self) -> NodesFile:
        for table, names in (("nodes", [n.name for n in self.nodes]),
                             ("components", [c.name for c in self.components])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"[[{table}]]: name(s) listed twice: {', '.join(dupes)}")
        nodes = {n.name for n in self.nodes}
        for i, c in enumerate(self.components):
            if c.node not in nodes:
                raise ValueError(f"[[components]][{i}] ({c.name}): node {c.node!r} is not in "
                                 f"[[nodes]] (listed: {', '.join(sorted(nodes)) or 'none'})")
        kinds = {c.name: c.kind for c in self.components}
        links = [(f"[[engines]][{i}].component", e.component, "engine")
                 for i, e in enumerate(self.engines)]
        links += [(f"[[masters]][{i}].component", m.component, "master")
                  for i, m in enumerate(self.masters)]
        links += [(f"[etcd].components[{i}]", c, "etcd")
                  for i, c in enumerate(self.etcd.components)]
        for where, name, kind in links:
            if name is None:
                continue
            if name not in kinds:
                raise ValueError(f"{where}: no [[components]] entry named {name!r}")
            if kinds[name] != kind:
                raise ValueError(f"{where}: component {name!r} is a {kinds[name]}, not a {kind}")
        return self

    @property
    def ledger_path(self) -> Path:
        """The fault ledger: ``[faults].ledger`` (relative to the file), else FILE + '.ledger'."""
        if self.faults.ledger is None:
            return self.path.with_name(self.path.name + ".ledger")
        ledger = self.faults.ledger.expanduser()
        return ledger if ledger.is_absolute() else self.path.parent / ledger

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"{self.path}: no node {name!r} (listed: "
                       f"{', '.join(n.name for n in self.nodes) or 'none'})")

    def component(self, name: str) -> ComponentSpec:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"{self.path}: no component {name!r} (listed: "
                       f"{', '.join(c.name for c in self.components) or 'none'})")

    def components_of(self, kind: str) -> list[ComponentSpec]:
        return [c for c in self.components if c.kind == kind]


def _where(loc: tuple[Any, ...]) -> str:
    """A pydantic location in TOML's words: ("nodes", 0, "port") -> [[nodes]][0].port."""
    if not loc:
        return "top level"
    head, rest = str(loc[0]), loc[1:]
    if rest and isinstance(rest[0], int):
        out, rest = f"[[{head}]][{rest[0]}]", rest[1:]
    else:
        out = f"[{head}]" if rest else head
    for part in rest:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def parse_nodes(doc: dict[str, Any], path: str | Path) -> NodesFile:
    """Validate an already-read TOML document; ``NodesFileError`` names the file and field."""
    path = Path(path)
    try:
        return NodesFile.model_validate({**doc, "path": path})
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{_where(err['loc'])}: {msg}" if err["loc"] else msg)
        raise NodesFileError(f"{path}: " + "; ".join(lines)) from None


def load_nodes(path: str | Path) -> NodesFile:
    """Read the node part of a cluster file."""
    path = Path(path).expanduser()
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover (Python 3.10)
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise NodesFileError(f"{path}: no such cluster file") from None
    except IsADirectoryError:
        raise NodesFileError(f"{path}: is a directory, not a cluster file") from None
    except tomllib.TOMLDecodeError as exc:
        raise NodesFileError(f"{path}: not valid TOML: {exc}") from None
    return parse_nodes(doc, path)
