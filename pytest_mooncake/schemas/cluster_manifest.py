"""The cluster file: one schema for what ``--mc-target=cluster:FILE`` observes, what
``pytest_mooncake.nodes`` drives over SSH, and what the lab writes
(the shipped ``pytest_mooncake/data/clusters/example.toml`` and ``nodes-example.toml``
document every field)::

    [cluster]      name, version (the report header); controller_address
    [etcd]         endpoints = ["host:port"]; components = [...]
    [[masters]]    admin = "http://host:port"; rpc = "host:port"; component
    [[engines]]    segment; control = "host:port"; protocol = "driver" | "reference";
                   aliases; component; lifecycle = "attach" | "per_test"; cache_env
    [[clients]]    control = "host:port"; protocol; component       (store clients)
    [toxiproxy]    url; [toxiproxy.proxies] NAME = "host:port"
    [faults]       allow = [...]; ledger; firewall
    [[nodes]]      name, host, port, user, key, known_hosts, sudo, address, run_dir, ...
    [[components]] name, kind, node, start | unit, env, pid_file, match, log, ready_*, ...
    [lab]          name, subnet, state, flavour                      (written by the lab)

``load_manifest`` (and ``parse_cluster`` for an already-read document) validates it, raising
``ManifestError`` naming the file and the field, and returns the ``ClusterFile``.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from pytest_mooncake.schemas.cluster_nodes import KINDS, ComponentSpec, NodeSpec
from pytest_mooncake.schemas.shipped_files import NotShipped, find
from pytest_mooncake.schemas.toml_documents import SchemaError, problem, read_toml, validate

TARGET_PERMISSIONS = ("observe", "transfers", "metadata_writes", "metadata_faults", "store")
"""What the cluster target may do through the deployment's own interfaces."""
ACTIONS = ("logs", "restart", "kill", "pause", "partition")
"""What node control may do (each alone, or ``ACTION:KIND`` for one kind of component)."""
PERMISSION_HELP = {
    "observe": "read metadata, master health/metrics, engine buffers",
    "transfers": "drive the listed engines to write/read each other",
    "metadata_writes": "put/delete keys in the deployment's etcd (planting values)",
    "metadata_faults": "route an engine's metadata traffic through a Toxiproxy proxy",
    "store": "drive the listed store clients (put/get/remove); a master_cluster() first "
             "removes every object the leader lists",
    "logs": "read component logs on their nodes",
    "restart": "stop (SIGTERM) and start components",
    "kill": "SIGKILL components",
    "pause": "SIGSTOP / SIGCONT components",
    "partition": "network partitions on the nodes (nft/iptables, or the lab's links)",
}
_HOSTPORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


class ManifestError(SchemaError):
    """The cluster file is unusable; the message names the file and the field."""


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _hostport(value: str) -> str:
    text = _non_empty(value)
    m = _HOSTPORT.match(text)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return text


def _url(value: str) -> str:
    text = _non_empty(value)
    parsed = urllib.parse.urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def _permission(value: str) -> str:
    if value in TARGET_PERMISSIONS or value in ACTIONS:
        return value
    action, sep, kind = value.partition(":")
    if sep and action in ACTIONS and kind in KINDS:
        return value
    raise ValueError(f"unknown permission {value!r} (known: "
                     f"{', '.join(TARGET_PERMISSIONS + ACTIONS)}; node actions may name a kind, "
                     f"e.g. kill:engine; kinds: {', '.join(KINDS)})")


NonEmpty = Annotated[str, AfterValidator(_non_empty)]
CacheSetting = Literal["MC_TE_METADATA_REFRESH_INTERVAL_SECONDS", "MC_DISABLE_METACACHE"]
"""The remote segment cache settings a Mooncake build may read from its environment
(``targets/mooncake/cache_knobs``)."""
HostPort = Annotated[str, AfterValidator(_hostport)]
Url = Annotated[str, AfterValidator(_url)]
Permission = Annotated[str, AfterValidator(_permission)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterTable(_Table):
    name: NonEmpty | None = Field(None, description="shown in the report (default: file name)")
    version: NonEmpty | None = Field(None, description="the deployment's Mooncake version")
    controller_address: NonEmpty | None = Field(None, description=(
        "this machine's address as the deployment's nodes reach it: components a test starts "
        "here beside the deployment (the old build of a rolling upgrade) listen on it"))


class EtcdTable(_Table):
    endpoints: tuple[HostPort, ...] = ()
    components: tuple[str, ...] = ()


class MasterEntry(_Table):
    admin: Url = Field(description="the master's admin/metrics URL (mooncake_master "
                                   "--metrics_port)")
    rpc: HostPort | None = None
    component: str | None = None
    flags: dict[str, str | int | float | bool] = Field(default_factory=dict, description=(
        "the flags this master runs with (--enable_oplog=true as enable_oplog = true): the "
        "column's deployment profile, recorded in the report"))


class EngineEntry(_Table):
    segment: NonEmpty = Field(description="the segment name the engine publishes")
    control: HostPort | None = Field(None, description=(
        "host:port of a control channel (absent: the engine is observed only: its descriptor, "
        "its sockets and log through its component)"))
    protocol: Literal["driver", "reference"] = Field("driver", description=(
        "what answers on control: pytest_mooncake's driver.py, or python -m reference_engine "
        "engine"))
    aliases: tuple[NonEmpty, ...] = ()
    component: str | None = None
    lifecycle: Literal["attach", "per_test"] = Field("attach", description=(
        "attach: a running engine is used as it is; per_test: the target starts it when a "
        "test asks for it and stops it when the test ends"))
    cache_env: tuple[CacheSetting, ...] = Field((), description=(
        "the cache settings its build reads from the environment (of "
        "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS, MC_DISABLE_METACACHE): a per_test driver "
        "engine whose component has a `start` is started with them for a test that asks for a "
        "cache TTL (ttl_ms)"))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.segment, *self.aliases)


class ClientEntry(_Table):
    control: HostPort = Field(description="host:port of the store client's control channel")
    protocol: Literal["driver", "reference"] = "driver"
    component: str | None = None


class ToxiproxyTable(_Table):
    url: Url | None = None
    proxies: dict[str, HostPort] = Field(default_factory=dict)


class FaultsTable(_Table):
    allow: tuple[Permission, ...] = ("observe",)
    ledger: Path | None = None
    firewall: Literal["auto", "nft", "iptables", "link"] = "auto"

    def permits(self, action: str, kind: str | None = None) -> bool:
        return action in self.allow or (kind is not None and f"{action}:{kind}" in self.allow)

    def missing(self, action: str, kind: str | None = None) -> str | None:
        """None when permitted; else the allow entry that would permit it, for messages."""
        if self.permits(action, kind):
            return None
        return f"{action}:{kind}" if kind else action


class LabTable(_Table):
    name: str
    subnet: str
    state: str
    flavour: str


class ClusterFile(_Table):
    cluster: ClusterTable = ClusterTable()
    etcd: EtcdTable = EtcdTable()
    masters: tuple[MasterEntry, ...] = ()
    engines: tuple[EngineEntry, ...] = ()
    clients: tuple[ClientEntry, ...] = ()
    toxiproxy: ToxiproxyTable = ToxiproxyTable()
    faults: FaultsTable = FaultsTable()
    nodes: tuple[NodeSpec, ...] = ()
    components: tuple[ComponentSpec, ...] = ()
    lab: LabTable | None = None
    _path: Path = PrivateAttr(default=Path("cluster.toml"))

    @model_validator(mode="after")
    def _consistent(self) -> ClusterFile:
        names = [n for e in self.engines for n in e.names]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise problem(("engines",), f"segment name(s) listed twice: {', '.join(dupes)}")
        if "metadata_faults" in self.faults.allow and not self.toxiproxy.url:
            raise problem(("faults", "allow"), "metadata_faults needs toxiproxy.url (the "
                          "Toxiproxy that fronts the deployment)")
        for table, listed in (("nodes", [n.name for n in self.nodes]),
                              ("components", [c.name for c in self.components])):
            twice = sorted({n for n in listed if listed.count(n) > 1})
            if twice:
                raise problem((table,), f"name(s) listed twice: {', '.join(twice)}")
        nodes = {n.name for n in self.nodes}
        for i, c in enumerate(self.components):
            if c.node not in nodes:
                raise problem(("components", i, "node"), (
                    f"component {c.name}: node {c.node!r} is not in [[nodes]] (listed: "
                    f"{', '.join(sorted(nodes)) or 'none'})"))
        self._check_links()
        return self

    def _check_links(self) -> None:
        kinds = {c.name: c.kind for c in self.components}
        links: list[tuple[tuple[Any, ...], str | None, str]] = []
        links += [(("engines", i, "component"), e.component, "engine")
                  for i, e in enumerate(self.engines)]
        links += [(("masters", i, "component"), m.component, "master")
                  for i, m in enumerate(self.masters)]
        links += [(("clients", i, "component"), c.component, "client")
                  for i, c in enumerate(self.clients)]
        links += [(("etcd", "components", i), c, "etcd")
                  for i, c in enumerate(self.etcd.components)]
        for loc, name, kind in links:
            if name is None:
                continue
            if name not in kinds:
                raise problem(loc, f"no [[components]] entry named {name!r}")
            if kinds[name] != kind:
                raise problem(loc, f"component {name!r} is of kind {kinds[name]}, not {kind}")
        for i, e in enumerate(self.engines):
            if e.lifecycle == "per_test" and e.component is None:
                raise problem(("engines", i, "lifecycle"), (
                    f"engine {e.segment}: per_test needs a component to start and stop"))

    # ------------------------------------------------------------------ what it says

    @property
    def path(self) -> Path:
        return self._path

    @property
    def name(self) -> str:
        return self.cluster.name or self.path.stem

    @property
    def version(self) -> str | None:
        return self.cluster.version

    @property
    def allow(self) -> frozenset[str]:
        return frozenset(self.faults.allow)

    def permits(self, action: str, kind: str | None = None) -> bool:
        return self.faults.permits(action, kind)

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

    def engine_entry(self, name: str) -> EngineEntry | None:
        """The engine publishing ``name`` or aliased so."""
        return next((e for e in self.engines if name in e.names), None)

    def segment_name(self, name: str) -> str:
        """The segment an engine publishes for a name a test uses (an alias maps to its
        engine's segment; any other name is itself)."""
        entry = self.engine_entry(name)
        return entry.segment if entry is not None else name


def parse_cluster(doc: dict[str, Any], path: str | Path) -> ClusterFile:
    """Validate an already-read document; ``ManifestError`` names the file and the field."""
    path = Path(path)
    try:
        spec = validate(ClusterFile, doc, path)
    except SchemaError as exc:
        raise ManifestError(str(exc)) from None
    spec._path = path
    return spec


def load_manifest(path: str | Path) -> ClusterFile:
    """Read and validate a cluster file (a path, or the name of a shipped one such as
    ``example``); ``ManifestError`` naming the file and the field."""
    try:
        path = find("clusters", str(Path(path).expanduser()))
    except NotShipped as exc:
        raise ManifestError(f"{path}: no such cluster file (--mc-target=cluster:FILE or a "
                            f"shipped name; {exc})") from None
    try:
        doc = read_toml(path)
    except SchemaError as exc:
        raise ManifestError(str(exc)) from None
    return parse_cluster(doc, path)
