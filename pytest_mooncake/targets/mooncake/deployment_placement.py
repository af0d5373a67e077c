"""The ``cluster`` target: an existing Mooncake deployment described by a TOML manifest
(``--mc-target=cluster:FILE``; ``schemas/cluster_manifest.py``,
``pytest_mooncake/data/clusters/example.toml``).

The manifest names what exists (etcd endpoints, master admin URLs, engine control endpoints
served by ``driver.py``, an optional Toxiproxy URL) and which faults the run may inject
(``[faults] allow = [...]``). This placement starts nothing, and never stops, kills or restarts
anything: such requests raise ``TargetLacks`` (n/a) with the manifest's permission list in the
reason. Its masters are read through the family's one admin reading (``master_admins``), its
engines through the family's driver commands (``driver_engines``).

Permissions (``allow``):
  observe          read metadata, master health/metrics, engine buffers (always needed)
  transfers        drive the listed engines to write/read each other
  metadata_writes  put/delete keys in the deployment's metadata store (planting values)
  metadata_faults  route engine metadata traffic through the manifest's Toxiproxy
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_mooncake.schemas.cluster_manifest import (
    EngineEntry,
    Manifest,
    ManifestError,
    load_manifest,
)
from pytest_mooncake.targets.base import (
    Capability,
    MasterEndpoint,
    MetadataHandle,
    TargetContext,
    TargetLacks,
)
from pytest_mooncake.targets.mooncake.adapter import MooncakeFamilyTarget
from pytest_mooncake.targets.mooncake.driver_control import ControlClient
from pytest_mooncake.targets.mooncake.driver_engines import DriverCommands
from pytest_mooncake.targets.mooncake.master_admins import MooncakeMasters
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata


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


class DeploymentEngine(DriverCommands):
    """An engine of the deployment, reached through its control endpoint; never stopped."""

    def __init__(self, entry: EngineEntry, manifest: Manifest, metadata: MetadataHandle,
                 lacks: Mapping[Capability, str]):
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



class DeploymentMasters(MooncakeMasters):
    """The deployment's masters, read through their admin URLs; never started, killed or
    drained."""

    def __init__(self, manifest: Manifest, build: str):
        self.manifest = manifest
        self.masters = list(manifest.masters)
        self.build = build
        self.where = f"{manifest.path}'s masters"
        self.drain_jobs: dict[str, str] = {}

    def admin_url(self, index: int) -> str:
        return self.masters[index].admin

    def observed(self) -> list[int]:
        return list(range(len(self.masters)))

    def master_log(self, index: int) -> str:
        raise TargetLacks(Capability.MASTER_CLUSTER,
                          f"cluster:{self.manifest.path} gives no access to master logs")

    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        raise _never(self.manifest, "starts masters", Capability.MASTER_CLUSTER)

    def kill_master(self, index: int) -> None:
        raise _never(self.manifest, "kills masters", Capability.MASTER_CLUSTER)

    def stop_master(self, index: int) -> None:
        raise _never(self.manifest, "stops masters", Capability.MASTER_CLUSTER)

    def start_client(self, client_id: str | None = None, version: str | None = None,
                     wait_attached: bool = True) -> Any:
        raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)

    def client(self, index: int = 0) -> Any:
        raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)

    def client_segment(self, index: int) -> str:
        raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)

    def drain_segment(self, segment: str) -> None:
        raise _never(self.manifest, "drains segments", Capability.MASTER_CLUSTER)

    def endpoint(self) -> MasterEndpoint:
        raise TargetLacks(Capability.FOREIGN_MASTER, (
            f"cluster:{self.manifest.path} observes the deployment's masters; it does not let "
            f"store clients of another target attach to them"))

    def logs(self) -> str:
        return "\n".join(f"== master {i} {m.admin}: {self.health(i)}"
                         for i, m in enumerate(self.masters))

    def close(self) -> None:
        """Nothing to stop: the masters are the deployment's."""


# ------------------------------------------------------------------------------- placement


class DeploymentPlacement:
    """An existing deployment: what the manifest lists, attached to and observed."""

    kind = "cluster"
    engine_options = frozenset({"ready_timeout"})
    master_options = frozenset({"ready_timeout"})

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.variant = str(manifest.path)
        self.facts: dict[str, Any] = {}
        self.capabilities = self._probe()
        self.etcd_routing = (f"cluster:{manifest.path} observes the deployment's masters and "
                             f"never chooses their etcd")
        self.fixed = ("it attaches to the deployment's components as they run and never "
                      "starts one")

    @property
    def version(self) -> str:
        return f"cluster {self.manifest.name} ({self.manifest.version or 'version not stated'})"

    def _probe(self) -> frozenset[Capability]:
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

    def describe(self) -> dict[str, Any]:
        return {"manifest": str(self.manifest.path), "allow": sorted(self.manifest.allow)}

    def open(self, ctx: TargetContext) -> None:
        pass

    def close(self) -> None:
        pass

    def _never_text(self) -> str:
        return (f"cluster:{self.manifest.path} does not permit metadata_writes "
                f"(allow = {sorted(self.manifest.allow)})")

    def metadata_store(self, kind: str) -> MetadataHandle:
        return GuardedMetadata(EtcdMetadata(list(self.manifest.etcd)), self.manifest,
                               self._never_text())

    def engine(self, segment: str, metadata: MetadataHandle, options: Mapping[str, Any],
               lacks: Mapping[Capability, str]) -> DeploymentEngine:
        """Attach to the listed engine named ``segment`` (or aliased so); starts nothing."""
        entry = next((e for e in self.manifest.engines
                      if segment == e.segment or segment in e.aliases), None)
        if entry is None:
            known = ", ".join(e.segment for e in self.manifest.engines)
            raise TargetLacks(Capability.ENGINE, (
                f"cluster:{self.manifest.path} lists no engine {segment!r} (listed: {known}; add "
                f"it to an engine's aliases) and never starts engines"))
        return DeploymentEngine(entry, self.manifest, metadata, lacks)

    def master_cluster(self, masters: int, clients: int,
                       options: Mapping[str, Any]) -> DeploymentMasters:
        if clients:
            raise _never(self.manifest, "starts store clients", Capability.MASTER_CLUSTER)
        return DeploymentMasters(self.manifest, self.version)

    def store_client(self, master: MasterEndpoint, client_id: str | None) -> Any:
        raise _never(self.manifest, "starts store clients", Capability.FOREIGN_MASTER)


class ClusterTarget(MooncakeFamilyTarget):
    """``--mc-target=cluster:FILE``: the family adapter with a ``DeploymentPlacement``."""

    kind = "cluster"

    def __init__(self, manifest: Manifest):
        super().__init__(DeploymentPlacement(manifest))

    @property
    def manifest(self) -> Manifest:
        return self.placement.manifest

    @classmethod
    def from_spec(cls, variant: str | None) -> ClusterTarget:
        from pytest_mooncake.targets import UnknownTarget

        if not variant:
            raise UnknownTarget("the cluster target needs a manifest: --mc-target=cluster:FILE "
                                "(see pytest_mooncake/data/clusters/example.toml)")
        try:
            return cls(load_manifest(variant))
        except ManifestError as exc:
            raise UnknownTarget(str(exc)) from None
