"""The ``mooncake`` target: a real Mooncake build (pip wheel or install directory).

Engines and store clients run in driver processes (``driver.py``) with the build's python;
masters are the build's ``mooncake_master`` binary. What the build can do is probed, not assumed:
``driver.py probe`` lists its Python API and binaries once per session, and every capability
the API has no means for is absent with a reason naming what is missing.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import Supervisor, port_open
from pytest_mooncake.targets.base import (
    Capability,
    MasterClusterHandle,
    MetadataHandle,
    Target,
    TargetContext,
    TargetError,
    TargetLacks,
)
from pytest_mooncake.targets.mooncake.install import MooncakeInstall, SpecError, locate
from pytest_mooncake.targets.mooncake.metadata import EtcdMetadata, HttpMetadata
from pytest_mooncake.targets.mooncake.placement import LocalPlacement

ENGINE_API = ("initialize", "register_memory", "transfer_sync_write", "transfer_sync_read",
              "get_first_buffer_address")
CACHE_API = ("sync_segment_cache", "set_metadata_cache_ttl_ms", "metadata_cache_ttl_ms")
COUNTER_API = re.compile(r"^(get_)?(stats|metrics|counters)$")
STORE_API = ("setup", "put", "get", "is_exist", "remove")
_counter = itertools.count(1)


class MooncakeTarget(Target):
    kind = "mooncake"
    master_protocol = "mooncake-coro-rpc"
    """mooncake_master's RPC, spoken by ``mooncake.store`` (``masters.PROTOCOL``)."""

    def __init__(self, install: MooncakeInstall, variant: str | None = None):
        super().__init__(variant)
        self.install = install
        self.facts: dict[str, Any] = {}
        self._caps: frozenset[Capability] | None = None
        self._lacks: dict[Capability, str] = {}
        self.supervisor: Supervisor | None = None

    @classmethod
    def from_spec(cls, variant: str | None) -> MooncakeTarget:
        try:
            install = locate(variant)
        except SpecError as exc:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(str(exc)) from None
        return cls(install, variant)

    @property
    def version(self) -> str:
        return self.install.version

    # ------------------------------------------------------------------ capabilities

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        if self._caps is None:
            self._caps, self._lacks = self._probe_capabilities()
        return self._caps

    def lack_reason(self, capability: Capability) -> str:
        _ = self.capabilities
        return self._lacks.get(capability, f"target {self.label} has no means for "
                                           f"{capability.value}")

    def _probe_capabilities(self) -> tuple[frozenset[Capability], dict[Capability, str]]:
        lacks: dict[Capability, str] = {}
        facts = self.install.probe()
        self.facts["probe"] = facts
        if "error" in facts:
            return frozenset(), {c: facts["error"] for c in Capability}
        ver = self.version
        engine = set(facts.get("engine_methods", []))
        missing_engine = [m for m in ENGINE_API if m not in engine]
        if "engine_error" in facts or missing_engine:
            why = facts.get("engine_error") or f"TransferEngine lacks {', '.join(missing_engine)}"
            for cap in (Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
                        Capability.METADATA_ETCD, Capability.METADATA_HTTP,
                        Capability.METADATA_FAULTS):
                lacks[cap] = f"mooncake.engine of {ver} is unusable: {why}"
        if not (engine & set(CACHE_API)):
            lacks[Capability.CACHE_CONTROL] = (
                f"mooncake.engine of {ver} exposes no metadata_cache_ttl_ms setting and no forced "
                f"refresh (TransferEngine has none of {', '.join(CACHE_API)}; its remote segment "
                f"cache has no TTL)")
        counters = sorted(m for m in engine if COUNTER_API.match(m))
        lacks[Capability.ENGINE_COUNTERS] = (
            f"the mooncake target does not read {', '.join(counters)} of {ver} yet" if counters
            else f"mooncake.engine of {ver} exposes no counters (TransferEngine has no "
                 f"stats/metrics/counters method)")
        if not facts.get("http_metadata_server") and Capability.METADATA_HTTP not in lacks:
            lacks[Capability.METADATA_HTTP] = (
                f"{ver} has no usable mooncake.http_metadata_server: "
                f"{facts.get('http_metadata_server_error', 'module missing')}")
        rdma = (f"{ver} runs its RDMA transport on real verbs devices only and offers no hook to "
                f"hold, reorder or replay completions")
        lacks[Capability.RDMA_CONTROL] = rdma
        lacks[Capability.SCHEDULER] = rdma
        store = set(facts.get("store_methods", []))
        master_bin = facts.get("binaries", {}).get("mooncake_master")
        if not master_bin:
            lacks[Capability.MASTER_CLUSTER] = f"{ver} ships no mooncake_master binary"
        elif "store_error" in facts or not set(STORE_API) <= store:
            lacks[Capability.MASTER_CLUSTER] = (
                f"mooncake.store of {ver} is unusable: "
                f"{facts.get('store_error') or 'MooncakeDistributedStore lacks ' + ', '.join(sorted(set(STORE_API) - store))}")
        lacks[Capability.MASTER_SNAPSHOT] = (
            f"{ver} offers no means to have a snapshot written on request: in HA mode with the "
            f"OpLog the leader skips snapshots ('snapshots are owned by standby') and a standby "
            f"with --enable_snapshot and MOONCAKE_SNAPSHOT_LOCAL_PATH wrote none within 25 s "
            f"here; its admin service has no snapshot endpoint")
        lacks[Capability.MASTER_FAULT_PLANTING] = (
            f"mooncake_master of {ver} has no means to plant an entry in a standby's replicated "
            f"state (no admin endpoint for it)")
        lacks[Capability.VERSION_SKEW] = (
            f"the mooncake target runs one build ({ver}); skew pairs come from --mc-matrix")
        lacks[Capability.CLIENT_VERSION] = (
            f"mooncake.store of {ver} announces its own build; it has no means to announce "
            f"version another build would (no client option sets it)")
        if Capability.MASTER_CLUSTER in lacks:
            lacks[Capability.FOREIGN_MASTER] = lacks[Capability.MASTER_CLUSTER]
        caps = frozenset(c for c in Capability if c not in lacks)
        return caps, lacks

    def describe(self) -> Mapping[str, Any]:
        out = dict(super().describe())
        out["install"] = {"spec": self.install.spec, "python": self.install.python,
                          "pythonpath": self.install.pythonpath}
        out["lacks"] = {c.value: r for c, r in sorted(self._lacks.items())}
        out["facts"] = {k: v for k, v in self.facts.items() if k != "probe"}
        return out

    def _require(self, capability: Capability) -> None:
        reason = self.missing(capability)
        if reason:
            raise TargetLacks(capability, reason)

    # ------------------------------------------------------------------ session

    def open(self, ctx: TargetContext) -> None:
        super().open(ctx)
        self.workdir = Path(ctx.workdir)
        self.supervisor = Supervisor(self.workdir / "logs", name="mooncake-target")

    def close(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop_all()

    def _session(self) -> Supervisor:
        if self.supervisor is None:
            raise TargetError("the mooncake target was not opened (no session context)")
        return self.supervisor

    def placement(self) -> LocalPlacement:
        """Components of this target run as local processes under the session supervisor."""
        master = self.facts.get("probe", {}).get("binaries", {}).get("mooncake_master", "")
        return LocalPlacement(self.install, self._session(), master)

    # ------------------------------------------------------------------ factories

    def metadata_store(self, kind: str = "etcd") -> MetadataHandle:
        if kind == "etcd":
            self._require(Capability.METADATA_ETCD)
            return EtcdMetadata(list(self.ctx.etcd_endpoints()))
        if kind == "http":
            self._require(Capability.METADATA_HTTP)
            return self.start_http_metadata()
        raise ValueError(f"metadata kind {kind!r}: the mooncake target offers etcd and http")

    def start_http_metadata(self) -> HttpMetadata:
        """The wheel's own HTTP metadata server on a free loopback port."""
        port = free_port()
        proc = self._session().start(
            f"mooncake-http-metadata-{port}",
            [self.install.python, "-m", "mooncake.http_metadata_server", "--host", "127.0.0.1",
             "--port", str(port)],
            env=self.install.env(), ready=port_open(port), ready_timeout=30)
        handle = HttpMetadata(f"127.0.0.1:{port}", process=proc)
        close = handle.close

        def close_and_release() -> None:
            close()
            release_port(port)

        handle.close = close_and_release  # type: ignore[method-assign]
        return handle

    def start_engine(self, segment: str, metadata: MetadataHandle, **options: Any):
        from pytest_mooncake.targets.mooncake.engines import ENGINE_OPTIONS, MooncakeEngine

        self._require(Capability.ENGINE)
        unknown = sorted(set(options) - set(ENGINE_OPTIONS))
        if unknown:
            raise TypeError(f"start_engine: unknown option(s) {', '.join(unknown)} for the "
                            f"mooncake target (known: {', '.join(ENGINE_OPTIONS)})")
        if options.get("ttl_ms") is not None:
            self._require(Capability.CACHE_CONTROL)
        if options.get("profile") not in (None, "", "mooncake"):
            raise TargetLacks(Capability.VERSION_SKEW, self.lack_reason(Capability.VERSION_SKEW))
        engine = MooncakeEngine(
            self.placement(), self.workdir, segment, metadata, self._lacks,
            buffer_size=int(options.get("buffer_size") or 1 << 20),
            fixed_address=int(options.get("fixed_address") or 0),
            ready_timeout=float(options.get("ready_timeout") or 30.0))
        if "descriptor_fields" not in self.facts:
            self._observe_descriptor(engine)
        return engine

    def _observe_descriptor(self, engine: Any) -> None:
        try:
            desc = json.loads(engine.raw_descriptor() or b"null")
        except ValueError:
            return
        if isinstance(desc, dict):
            self.facts["descriptor_fields"] = sorted(desc)
            self.facts["descriptor_has_instance_id"] = "instance_id" in desc

    def probe_descriptor(self, metadata: MetadataHandle) -> dict[str, Any]:
        """Start one engine, read its published key, stop it: which fields 0.3.x publishes."""
        segment = f"mc-probe-{os.getpid()}-{next(_counter)}"
        engine = self.start_engine(segment, metadata)
        try:
            raw = engine.raw_descriptor()
        finally:
            engine.stop()
        desc = json.loads(raw) if raw else {}
        self.facts["descriptor_fields"] = sorted(desc)
        self.facts["descriptor_has_instance_id"] = "instance_id" in desc
        return {"key": metadata.segment_key(segment), "fields": sorted(desc),
                "instance_id": "instance_id" in desc}

    def master_cluster(self, masters: int = 2, clients: int = 1,
                       **options: Any) -> MasterClusterHandle:
        from pytest_mooncake.targets.mooncake.masters import (
            MOONCAKE_ETCD_ROUTING,
            MooncakeMasterCluster,
            lacks_etcd_routing,
        )

        self._require(Capability.MASTER_CLUSTER)
        if options.get("master_etcd"):
            raise lacks_etcd_routing("master_etcd", MOONCAKE_ETCD_ROUTING)
        return MooncakeMasterCluster(
            self.placement(), self.workdir / f"cluster-{next(_counter)}",
            list(self.ctx.etcd_endpoints()), masters=masters, clients=clients, **options)

    def store_client(self, master: Any, client_id: str | None = None,
                     version: str | None = None, wait_attached: bool = True) -> Any:
        """A real ``mooncake.store`` client of this build attached to ``master``, the masters
        of another Mooncake target (another build, same RPC); it cannot announce a version.
        Stopped with the session's processes at ``close()`` if the caller did not."""
        from pytest_mooncake.targets.mooncake.masters import start_store_client

        lacks = self.store_client_lacks(master, version)
        if lacks:
            raise lacks
        if not master.host_reachable:
            raise TargetLacks(Capability.FOREIGN_MASTER, (
                f"the masters of {master.build} are reachable only inside their container "
                f"network; store clients of {self.version} run on this host"))
        n = next(_counter)
        workdir = self.workdir / f"store-client-{n}"
        workdir.mkdir(parents=True, exist_ok=True)
        return start_store_client(self.placement(), workdir, list(master.etcd),
                                  master.cluster_id, n, client_id, 30.0)
