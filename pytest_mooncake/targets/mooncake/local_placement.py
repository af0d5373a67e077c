"""The ``mooncake`` target: a real Mooncake build (pip wheel or install directory), its
components as processes on this host.

Engines and store clients run in driver processes (``driver.py``) with the build's python;
masters are the build's ``mooncake_master`` binary, all under the session's supervisor, bound to
loopback. What the build can do is probed, not assumed: ``driver.py probe`` lists its Python API
and binaries once per session, and every capability the API has no means for is absent with a
reason naming what is missing.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import Supervisor, port_open
from pytest_mooncake.targets.base import Capability, MetadataHandle, TargetContext, TargetError
from pytest_mooncake.targets.mooncake.adapter import MooncakeFamilyTarget
from pytest_mooncake.targets.mooncake.cache_knobs import REFRESH_ENV, CacheKnobs
from pytest_mooncake.targets.mooncake.install import MooncakeInstall, SpecError, locate
from pytest_mooncake.targets.mooncake.launchers import LocalLauncher
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata, HttpMetadata
from pytest_mooncake.targets.mooncake.option_rules import MOONCAKE_ETCD_ROUTING
from pytest_mooncake.targets.mooncake.process_placement import ProcessPlacement

ENGINE_API = ("initialize", "register_memory", "transfer_sync_write", "transfer_sync_read",
              "get_first_buffer_address")
FORCED_API = ("sync_segment_cache", "refresh_segment", "force_refresh")
COUNTER_API = re.compile(r"^(get_)?(stats|metrics|counters)$")
STORE_API = ("setup", "put", "get", "is_exist", "remove")


class LocalPlacement(ProcessPlacement):
    """Processes of an installed build on this host, under the session's supervisor."""

    kind = "mooncake"
    etcd_routing = MOONCAKE_ETCD_ROUTING

    def __init__(self, install: MooncakeInstall, variant: str | None = None):
        self.install = install
        self.variant = variant
        self.facts: dict[str, Any] = {}
        self._caps: frozenset[Capability] | None = None
        self._lacks: dict[Capability, str] = {}
        self._supervisor: Supervisor | None = None

    @property
    def version(self) -> str:
        return self.install.version

    @property
    def capabilities(self) -> frozenset[Capability]:
        if self._caps is None:
            self._caps, self._lacks = self._probe_capabilities()
        return self._caps

    def lack_reason(self, capability: Capability) -> str:
        _ = self.capabilities
        label = f"mooncake:{self.variant}" if self.variant else "mooncake"
        return self._lacks.get(capability, f"target {label} has no means for "
                                           f"{capability.value}")

    def _probe_capabilities(self) -> tuple[frozenset[Capability], dict[Capability, str]]:
        lacks: dict[Capability, str] = {}
        facts = self.install.probe()
        self.facts["probe"] = facts
        if "error" in facts:
            return frozenset(), {c: facts["error"] for c in Capability}
        ver = self.install.version
        engine = set(facts.get("engine_methods", []))
        missing_engine = [m for m in ENGINE_API if m not in engine]
        if "engine_error" in facts or missing_engine:
            why = facts.get("engine_error") or f"TransferEngine lacks {', '.join(missing_engine)}"
            for cap in (Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
                        Capability.METADATA_ETCD, Capability.METADATA_HTTP,
                        Capability.METADATA_FAULTS):
                lacks[cap] = f"mooncake.engine of {ver} is unusable: {why}"
        if Capability.ENGINE in lacks:
            lacks[Capability.CACHE_CONTROL] = lacks[Capability.ENGINE]
        self.cache_knobs = CacheKnobs.of(facts.get("engine_env", []), ver)
        no_ttl = self.cache_knobs.missing()
        if no_ttl:
            lacks[Capability.CACHE_TTL] = no_ttl
        forced = sorted(engine & set(FORCED_API))
        lacks[Capability.FORCED_REFRESH] = (
            f"the mooncake target does not drive {', '.join(forced)} of {ver} yet" if forced
            else f"mooncake.engine of {ver} offers no forced refresh of one peer (TransferEngine "
                 f"has none of {', '.join(FORCED_API)}; its cache refreshes only on "
                 f"{REFRESH_ENV}'s interval)")
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
            lacks[Capability.PROMOTABILITY] = lacks[Capability.MASTER_CLUSTER]
        # promotability is probed live: the first promotable() asks a running master's admin
        # service (MooncakeMasters.promotable) and raises TargetLacks with what it answered
        caps = frozenset(c for c in Capability if c not in lacks)
        return caps, lacks

    def describe(self) -> dict[str, Any]:
        return {"install": {"spec": self.install.spec, "python": self.install.python,
                            "pythonpath": self.install.pythonpath},
                "lacks": {c.value: r for c, r in sorted(self._lacks.items())},
                "facts": {k: v for k, v in self.facts.items() if k != "probe"}}

    # ------------------------------------------------------------------ session

    def open(self, ctx: TargetContext) -> None:
        super().open(ctx)
        self._supervisor = Supervisor(self.workdir / "logs", name="mooncake-target")

    def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.stop_all()

    def supervisor(self) -> Supervisor:
        if self._supervisor is None:
            raise TargetError("the mooncake target was not opened (no session context)")
        return self._supervisor

    def launcher(self) -> LocalLauncher:
        """Components run as local processes under the session supervisor."""
        master = self.facts.get("probe", {}).get("binaries", {}).get("mooncake_master", "")
        return LocalLauncher(self.install, self.supervisor(), master)

    def master_etcd(self) -> list[str]:
        return list(self.ctx.etcd_endpoints())

    # ------------------------------------------------------------------ metadata

    def metadata_store(self, kind: str) -> MetadataHandle:
        if kind == "http":
            return self.start_http_metadata()
        return EtcdMetadata(self.master_etcd())

    def start_http_metadata(self) -> HttpMetadata:
        """The wheel's own HTTP metadata server on a free loopback port."""
        port = free_port()
        proc = self.supervisor().start(
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


class MooncakeTarget(MooncakeFamilyTarget):
    """``--mc-target=mooncake[:SPEC]``: the family adapter with a ``LocalPlacement``."""

    kind = "mooncake"

    def __init__(self, install: MooncakeInstall, variant: str | None = None):
        super().__init__(LocalPlacement(install, variant))

    @classmethod
    def from_spec(cls, variant: str | None) -> MooncakeTarget:
        try:
            install = locate(variant)
        except SpecError as exc:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(str(exc)) from None
        return cls(install, variant)

    @property
    def install(self) -> MooncakeInstall:
        return self.placement.install

    @property
    def supervisor(self) -> Supervisor | None:
        return self.placement._supervisor
