"""The ``cluster`` target: an existing Mooncake deployment described by a TOML manifest.

``--mc-target=cluster:FILE``. The manifest names what exists (etcd endpoints, master admin URLs,
engine control endpoints served by ``targets/mooncake/driver.py``, an optional Toxiproxy URL)
and which faults the run may inject (``[faults] allow = [...]``). This target starts nothing,
and never stops, kills or restarts anything: such requests raise ``TargetLacks`` (n/a) with
the manifest's permission list in the reason. ``fixtures/clusters/example.toml`` documents the
format.

Permissions (``allow``):
  observe          read metadata, master health/metrics, engine buffers (always needed)
  transfers        drive the listed engines to write/read each other
  metadata_writes  put/delete keys in the deployment's metadata store (planting values)
  metadata_faults  route engine metadata traffic through the manifest's Toxiproxy
"""

from __future__ import annotations

import json
import re
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.targets.base import (
    Capability,
    MasterClusterHandle,
    MetadataHandle,
    Target,
    TargetLacks,
)

PERMISSIONS = ("observe", "transfers", "metadata_writes", "metadata_faults")
TABLES = ("cluster", "etcd", "masters", "engines", "toxiproxy", "faults")
_HOSTPORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


class ManifestError(ValueError):
    """The manifest is unusable; the message names the file and the field."""


# ------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class EngineEntry:
    segment: str
    control: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class MasterEntry:
    admin: str
    rpc: str | None = None


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    version: str | None
    etcd: tuple[str, ...]
    masters: tuple[MasterEntry, ...]
    engines: tuple[EngineEntry, ...]
    toxiproxy: str | None
    allow: frozenset[str]
    proxies: Mapping[str, str] = field(default_factory=dict)

    def permits(self, what: str) -> bool:
        return what in self.allow


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover (Python 3.10)
        try:
            import tomli as tomllib
        except ImportError:
            raise ManifestError(f"{path}: reading TOML on Python 3.10 needs `pip install tomli`") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such manifest file (--mc-target=cluster:FILE)") from None
    except IsADirectoryError:
        raise ManifestError(f"{path}: is a directory, not a manifest file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None


class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, why: str) -> ManifestError:
        return ManifestError(f"{self.path}: {where}: {why}")

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return value.strip()

    def hostport(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        m = _HOSTPORT.match(text)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise self.fail(where, f"expected host:port, got {text!r}")
        return text

    def url(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        parsed = urllib.parse.urlparse(text)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise self.fail(where, f"expected an http:// or https:// URL, got {text!r}")
        return text.rstrip("/")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {type(value).__name__}")
        return value

    def keys(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
        unknown = sorted(set(table) - set(allowed))
        if unknown:
            raise self.fail(where, f"unknown key(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(allowed)})")

    def array(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected an array, got {type(value).__name__}")
        return value


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a cluster manifest; raises ``ManifestError`` naming file and field."""
    path = Path(path).expanduser()
    doc = _load_toml(path)
    c = _Checker(path)
    c.keys(doc, TABLES, "top level")
    meta = c.table(doc.get("cluster", {}), "[cluster]")
    c.keys(meta, ("name", "version"), "[cluster]")
    name = c.string(meta["name"], "[cluster].name") if "name" in meta else path.stem
    version = c.string(meta["version"], "[cluster].version") if "version" in meta else None

    etcd_t = c.table(doc.get("etcd", {}), "[etcd]")
    c.keys(etcd_t, ("endpoints",), "[etcd]")
    etcd = tuple(c.hostport(e, f"[etcd].endpoints[{i}]")
                 for i, e in enumerate(c.array(etcd_t.get("endpoints", []), "[etcd].endpoints")))

    masters = []
    for i, m in enumerate(c.array(doc.get("masters", []), "[[masters]]")):
        where = f"[[masters]][{i}]"
        m = c.table(m, where)
        c.keys(m, ("admin", "rpc"), where)
        if "admin" not in m:
            raise c.fail(where, "missing key admin (the master's admin/metrics URL)")
        masters.append(MasterEntry(c.url(m["admin"], f"{where}.admin"),
                                   c.hostport(m["rpc"], f"{where}.rpc") if "rpc" in m else None))

    engines = []
    for i, e in enumerate(c.array(doc.get("engines", []), "[[engines]]")):
        where = f"[[engines]][{i}]"
        e = c.table(e, where)
        c.keys(e, ("segment", "control", "aliases"), where)
        for key in ("segment", "control"):
            if key not in e:
                raise c.fail(where, f"missing key {key}")
        aliases = tuple(c.string(a, f"{where}.aliases[{j}]")
                        for j, a in enumerate(c.array(e.get("aliases", []), f"{where}.aliases")))
        engines.append(EngineEntry(c.string(e["segment"], f"{where}.segment"),
                                   c.hostport(e["control"], f"{where}.control"), aliases))
    names = [n for e in engines for n in (e.segment, *e.aliases)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise c.fail("[[engines]]", f"segment name(s) listed twice: {', '.join(dupes)}")

    toxi_t = c.table(doc.get("toxiproxy", {}), "[toxiproxy]")
    c.keys(toxi_t, ("url", "proxies"), "[toxiproxy]")
    toxiproxy = c.url(toxi_t["url"], "[toxiproxy].url") if "url" in toxi_t else None
    proxies_t = c.table(toxi_t.get("proxies", {}), "[toxiproxy.proxies]")
    proxies = {str(k): c.hostport(v, f"[toxiproxy.proxies].{k}") for k, v in proxies_t.items()}

    faults = c.table(doc.get("faults", {}), "[faults]")
    c.keys(faults, ("allow",), "[faults]")
    allow = []
    for i, a in enumerate(c.array(faults.get("allow", ["observe"]), "[faults].allow")):
        a = c.string(a, f"[faults].allow[{i}]")
        if a not in PERMISSIONS:
            raise c.fail(f"[faults].allow[{i}]",
                         f"unknown permission {a!r} (known: {', '.join(PERMISSIONS)})")
        allow.append(a)
    if "metadata_faults" in allow and not toxiproxy:
        raise c.fail("[faults].allow", "metadata_faults needs [toxiproxy].url (the Toxiproxy "
                                       "that fronts the deployment; pass it as --mc-toxiproxy)")
    return Manifest(path, name, version, etcd, tuple(masters), tuple(engines), toxiproxy,
                    frozenset(allow), proxies)


# ------------------------------------------------------------------------------- handles


class _Remote:
    """Stands in for a process this target did not start (the control channel asks it for
    liveness, names and logs)."""

    def __init__(self, name: str):
        self.name = name
        self.returncode = None
        self.pid = None

    def alive(self) -> bool:
        return True

    def log_tail(self, lines: int = 30) -> str:
        return f"(an engine of the existing deployment: {self.name}; its log is not ours)"


class GuardedMetadata:
    """The deployment's metadata store: reads always, writes only with ``metadata_writes``."""

    def __init__(self, inner: MetadataHandle, manifest: Manifest, never: str):
        self._inner = inner
        self._manifest = manifest
        self._never = never

    kind = property(lambda self: self._inner.kind)
    uri = property(lambda self: self._inner.uri)
    address = property(lambda self: self._inner.address)

    def _writable(self, what: str) -> None:
        if not self._manifest.permits("metadata_writes"):
            raise TargetLacks(Capability.METADATA_FAULTS,
                              f"{what} in the deployment's etcd: {self._never}")

    def get(self, key: str) -> bytes | None:
        return self._inner.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        return self._inner.keys(prefix)

    def segment_key(self, segment: str) -> str:
        return self._inner.segment_key(segment)

    def put(self, key: str, value: bytes) -> None:
        self._writable(f"put {key!r}")
        self._inner.put(key, value)

    def delete(self, key: str) -> bool:
        self._writable(f"delete {key!r}")
        return self._inner.delete(key)

    def through(self, address: str) -> GuardedMetadata:
        if not self._manifest.permits("metadata_faults"):
            raise TargetLacks(Capability.METADATA_FAULTS,
                              f"routing metadata through {address}: {self._never}")
        return GuardedMetadata(self._inner.through(address), self._manifest, self._never)

    def close(self) -> None:
        self._inner.close()


def _never(manifest: Manifest, action: str, capability: Capability) -> TargetLacks:
    return TargetLacks(capability, (
        f"cluster:{manifest.path} never {action} (it only observes an existing deployment; "
        f"faults allowed by the manifest: {', '.join(sorted(manifest.allow))})"))


def _engine_class() -> type:
    from pytest_mooncake.targets.mooncake.engines import DriverCommands

    class ClusterEngine(DriverCommands):
        """An engine of the deployment, reached through its control endpoint; never stopped."""

        def __init__(self, entry: EngineEntry, manifest: Manifest, metadata: MetadataHandle,
                     lacks: Mapping[Capability, str]):
            from pytest_mooncake.targets.mooncake.control import ControlClient

            self.entry = entry
            self.manifest = manifest
            self.segment = entry.segment
            self.metadata = metadata
            self.lacks = dict(lacks)
            host, _, port = entry.control.rpartition(":")
            self.control = ControlClient(_Remote(entry.segment), int(port), host=host.strip("[]"))
            self.info = {k: v for k, v in self._call("info").items() if k != "ok"}
            self.pid = self.info.get("pid")

        def _guard_transfers(self) -> None:
            if not self.manifest.permits("transfers"):
                raise _never(self.manifest, "drives transfers between engines (allow "
                                            "\"transfers\" to let it)", Capability.ENGINE)

        def write(self, peer: str, offset: int, data: bytes):
            self._guard_transfers()
            return super().write(peer, offset, data)

        def read(self, peer: str, offset: int, length: int):
            self._guard_transfers()
            return super().read(peer, offset, length)

        def write_at(self, peer: str, address: int, data: bytes):
            self._guard_transfers()
            return super().write_at(peer, address, data)

        def local_write(self, offset: int, data: bytes) -> None:
            self._guard_transfers()
            super().local_write(offset, data)

        def restart(self, keep_addresses: bool = False) -> None:
            raise _never(self.manifest, "restarts engines", Capability.ENGINE_RESTART)

        def kill(self) -> None:
            raise _never(self.manifest, "kills engines", Capability.ENGINE_RESTART)

        def stop(self) -> None:
            """Detach: close the control connection; the engine keeps running."""
            self.control.close()

        def alive(self) -> bool:
            try:
                return bool(self._call("info").get("ok"))
            except Exception:  # noqa: BLE001 (unreachable means: not known alive)
                return False

        def logs(self) -> str:
            return self.control.process.log_tail()

    return ClusterEngine


class ClusterMasters:
    """The deployment's masters, observed through their admin URLs; never started or killed."""

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.masters = list(manifest.masters)

    def health(self, index: int) -> dict[str, Any]:
        from pytest_mooncake.targets.mooncake.masters import admin_get

        status, body = admin_get(self.masters[index].admin + "/health")
        try:
            return json.loads(body) if status == 200 else {"error": f"{status}: {body[:200]}"}
        except ValueError:
            return {"error": f"non-JSON /health: {body[:200]}"}

    def serving(self) -> list[int]:
        return [i for i in range(len(self.masters)) if self.health(i).get("service_ready") is True]

    def leader(self, timeout: float = 10.0) -> int:
        from pytest_mooncake.targets.mooncake.masters import wait_for

        return wait_for(self.serving, timeout, f"serving leader among {self.manifest.path}'s "
                                               f"masters")[0]

    def standbys(self) -> list[int]:
        return [i for i in range(len(self.masters)) if self.health(i).get("role") == "standby"]

    def metrics(self, index: int) -> Mapping[str, float]:
        from pytest_mooncake.targets.mooncake.masters import admin_get, parse_metrics

        status, body = admin_get(self.masters[index].admin + "/metrics", timeout=5.0)
        if status != 200:
            raise TargetLacks(Capability.MASTER_CLUSTER,
                              f"GET {self.masters[index].admin}/metrics answered {status}")
        return parse_metrics(body)

    def key_count(self, index: int) -> int:
        return int(self.metrics(index).get("master_key_count", 0))

    def keys(self, index: int) -> list[str]:
        from pytest_mooncake.targets.mooncake.masters import admin_get

        status, body = admin_get(self.masters[index].admin + "/get_all_keys", timeout=10.0)
        if status != 200:
            raise TargetLacks(Capability.MASTER_CLUSTER,
                              f"GET {self.masters[index].admin}/get_all_keys answered {status}: "
                              f"{body[:200]}")
        return [line.strip() for line in body.splitlines() if line.strip()]

    def master_log(self, index: int) -> str:
        raise TargetLacks(Capability.MASTER_CLUSTER,
                          f"cluster:{self.manifest.path} gives no access to master logs")

    def promotable(self, index: int) -> Mapping[str, Any]:
        from pytest_mooncake.targets.mooncake.masters import PROMOTABILITY_PATHS, admin_get

        tried = []
        for path in PROMOTABILITY_PATHS:
            status, body = admin_get(self.masters[index].admin + path)
            if status == 200:
                return json.loads(body)
            tried.append(f"GET {path} -> {status}")
        raise TargetLacks(Capability.MASTER_CLUSTER,
                          f"master {self.masters[index].admin} exposes no promotability endpoint "
                          f"({'; '.join(tried)})")

    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        raise _never(self.manifest, "starts masters", Capability.MASTER_CLUSTER)

    def kill_master(self, index: int) -> None:
        raise _never(self.manifest, "kills masters", Capability.MASTER_CLUSTER)

    def stop_master(self, index: int) -> None:
        raise _never(self.manifest, "stops masters", Capability.MASTER_CLUSTER)

    def client(self, index: int = 0) -> Any:
        raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)

    def endpoint(self) -> Any:
        raise TargetLacks(Capability.FOREIGN_MASTER, (
            f"cluster:{self.manifest.path} observes the deployment's masters; it does not let "
            f"store clients of another target attach to them"))

    def logs(self) -> str:
        return "\n".join(f"== master {i} {m.admin}: {self.health(i)}"
                         for i, m in enumerate(self.masters))

    def close(self) -> None:
        """Nothing to stop: the masters are the deployment's."""


# ------------------------------------------------------------------------------- target


class ClusterTarget(Target):
    kind = "cluster"

    def __init__(self, manifest: Manifest):
        super().__init__(str(manifest.path))
        self.manifest = manifest
        self.capabilities = self._capabilities()  # type: ignore[misc]

    @classmethod
    def from_spec(cls, variant: str | None) -> ClusterTarget:
        from pytest_mooncake.targets import UnknownTarget

        if not variant:
            raise UnknownTarget("the cluster target needs a manifest: --mc-target=cluster:FILE "
                                "(see fixtures/clusters/example.toml)")
        try:
            return cls(load_manifest(variant))
        except ManifestError as exc:
            raise UnknownTarget(str(exc)) from None

    @property
    def version(self) -> str:
        return f"cluster {self.manifest.name} ({self.manifest.version or 'version not stated'})"

    def _capabilities(self) -> frozenset[Capability]:
        m = self.manifest
        caps = set()
        if m.etcd:
            caps.add(Capability.METADATA_ETCD)
        if m.engines and m.etcd and m.permits("transfers"):
            caps.add(Capability.ENGINE)
        if m.masters:
            caps.add(Capability.MASTER_CLUSTER)
        if m.permits("metadata_faults") and m.etcd:
            caps.add(Capability.METADATA_FAULTS)
        return frozenset(caps)

    def lack_reason(self, capability: Capability) -> str:
        m = self.manifest
        where = f"cluster:{m.path}"
        if capability is Capability.ENGINE and m.engines and not m.permits("transfers"):
            return f"{where} does not permit transfers (allow = {sorted(m.allow)})"
        if capability is Capability.METADATA_FAULTS:
            return (f"{where} does not permit metadata_faults (allow = {sorted(m.allow)})")
        missing = {
            Capability.ENGINE: "lists no [[engines]] with control endpoints (and [etcd])",
            Capability.METADATA_ETCD: "lists no [etcd].endpoints",
            Capability.MASTER_CLUSTER: "lists no [[masters]]",
        }
        if capability in missing:
            return f"{where} {missing[capability]}"
        return (f"{where} never starts, restarts or kills components, and an existing deployment "
                f"offers no means for {capability.value}")

    def _never_text(self) -> str:
        return (f"cluster:{self.manifest.path} does not permit metadata_writes "
                f"(allow = {sorted(self.manifest.allow)})")

    def metadata_store(self, kind: str = "etcd") -> MetadataHandle:
        from pytest_mooncake.targets.mooncake.metadata import EtcdMetadata

        if kind != "etcd" or not self.manifest.etcd:
            return super().metadata_store(kind)
        return GuardedMetadata(EtcdMetadata(list(self.manifest.etcd)), self.manifest,
                               self._never_text())

    def start_engine(self, segment: str, metadata: MetadataHandle, **options: Any):
        """Attach to the listed engine named ``segment`` (or aliased so); starts nothing."""
        if Capability.ENGINE not in self.capabilities:
            raise TargetLacks(Capability.ENGINE, self.lack_reason(Capability.ENGINE))
        entry = next((e for e in self.manifest.engines
                      if segment == e.segment or segment in e.aliases), None)
        if entry is None:
            known = ", ".join(e.segment for e in self.manifest.engines)
            raise TargetLacks(Capability.ENGINE, (
                f"cluster:{self.manifest.path} lists no engine {segment!r} (listed: {known}; add "
                f"it to an engine's aliases) and never starts engines"))
        lacks = {c: self.lack_reason(c) for c in Capability if c not in self.capabilities}
        return _engine_class()(entry, self.manifest, metadata, lacks)

    def master_cluster(self, masters: int = 2, clients: int = 1,
                       **options: Any) -> MasterClusterHandle:
        if options.get("master_etcd"):
            from pytest_mooncake.targets.mooncake.masters import lacks_etcd_routing

            raise lacks_etcd_routing("master_etcd", (
                f"cluster:{self.manifest.path} observes the deployment's masters and never "
                f"chooses their etcd"))
        if not self.manifest.masters:
            return super().master_cluster(masters, clients, **options)
        if clients:
            raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)
        return ClusterMasters(self.manifest)
