"""The reference target: the Python reference engine under its two profiles.

``rfc`` implements every requirement; ``legacy`` reproduces Mooncake 0.3.13's behaviour before
the RFCs. This package (and tests/) is the only place outside reference_engine that imports
reference_engine; each module here drives one part of it (engines, RDMA, masters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_mooncake.targets.base import (
    Capability,
    EngineHandle,
    MasterEndpoint,
    MetadataHandle,
    Target,
    TargetContext,
)

PROFILES = ("rfc", "legacy")

ENGINE_CAPABILITIES = frozenset({
    Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
    Capability.CACHE_CONTROL, Capability.CACHE_TTL, Capability.FORCED_REFRESH,
    Capability.ENGINE_COUNTERS, Capability.METADATA_ETCD, Capability.METADATA_HTTP,
    Capability.METADATA_REDIS, Capability.METADATA_P2P, Capability.REGISTER_MEMORY,
})
MASTER_CAPABILITIES = frozenset({
    Capability.MASTER_CLUSTER, Capability.MASTER_SNAPSHOT, Capability.MASTER_FAULT_PLANTING,
    Capability.CLIENT_VERSION, Capability.FOREIGN_MASTER, Capability.PROMOTABILITY,
    Capability.MASTER_WIRE,
    Capability.HA_REDIS,
})
RDMA_CAPABILITIES = frozenset({Capability.RDMA_CONTROL, Capability.SCHEDULER,
                               Capability.RDMA_STATE})


class ReferenceTarget(Target):
    kind = "reference"
    capabilities = ENGINE_CAPABILITIES | MASTER_CAPABILITIES | RDMA_CAPABILITIES
    binds_any_host = True
    """Its engines bind ``TargetContext.bind_host`` (``--host``)."""
    master_protocol = "reference-json-rpc"
    """Its masters and store clients speak the reference master protocol (length-prefixed
    JSON over TCP); ``targets/reference/masters.py`` spells it ``PROTOCOL``."""
    master_listener_protocols = ("mooncake-coro-rpc",)
    """Each master also answers mooncake_master's RPC on a listener of its own
    (``targets/reference/wire_listeners.py``), where a release's store client attaches."""

    def __init__(self, profile: str = "rfc"):
        super().__init__(None if profile == "rfc" else profile)
        self.profile = profile
        self._engines: Any = None
        self._store_clients: list[Any] = []

    def open(self, ctx: TargetContext) -> None:
        super().open(ctx)
        self._engines = None

    def _engine_parts(self) -> Any:
        if self._engines is None:
            from pytest_mooncake.targets.reference.engines import ReferenceEngines

            self._engines = ReferenceEngines(self.ctx.workdir / "engines", self.profile,
                                             self.ctx.etcd_endpoints, self.ctx.bind_host,
                                             self.ctx.redis_address)
        return self._engines

    def metadata_store(self, kind: str = "etcd") -> MetadataHandle:
        store = self._engine_parts().metadata_store(kind)
        if kind == "p2p":
            store.deployment = self.label
        return store

    def start_engine(self, segment: str, metadata: MetadataHandle, **options: Any
                     ) -> EngineHandle:
        """Options: ttl_ms, buffer_size, profile (rfc/legacy), fixed_address, data_port."""
        return self._engine_parts().start_engine(segment, metadata, **options)

    def master_cluster(self, masters: int = 2, clients: int = 1, **options: Any) -> Any:
        """HA masters + store-client processes on the deployment's HA backend (``--mc-ha``):
        mc_etcd, or mc_redis (leader hash and OpLog in Redis); options: see
        ReferenceMasterCluster."""
        from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster

        redis = self.ctx.redis_address() if self.deployment_backends()["ha"] == "redis" else None
        etcd = [] if redis else self.ctx.etcd_endpoints()

        workdir = self.ctx.workdir / "masters"
        workdir.mkdir(parents=True, exist_ok=True)
        import tempfile

        profile = options.pop("profile", self.profile)
        return ReferenceMasterCluster(etcd, Path(tempfile.mkdtemp(dir=workdir)), profile,
                                      masters, clients, redis=redis, **options)

    def store_client(self, master: MasterEndpoint, client_id: str | None = None,
                     version: str | None = None, wait_attached: bool = True) -> Any:
        """A ``python -m reference_engine client`` process of this target's profile attached
        to ``master`` (a reference master cluster of any profile), announcing ``version``
        (default the reference's own); stopped at ``close()`` if the caller did not."""
        lacks = self.store_client_lacks(master, version)
        if lacks:
            raise lacks
        import uuid

        from pytest_mooncake.targets.reference.masters import start_client_process

        workdir = self.ctx.workdir / "clients"
        workdir.mkdir(parents=True, exist_ok=True)
        client_id = client_id or f"{self.profile}-client-{uuid.uuid4().hex[:8]}"
        client = start_client_process(list(master.etcd), master.cluster_id, workdir,
                                      len(self._store_clients), client_id, self.profile, version,
                                      wait_attached=wait_attached, redis=master.redis)
        self._store_clients.append(client)
        return client

    def rdma(self, **options: Any) -> Any:
        """The RDMA handle (see targets/reference/rdma_handle.py); options: seed, schedules, strategy,
        replay, verbs (only ``sim`` is driven here)."""
        verbs = options.get("verbs") or "auto"
        verbs = "sim" if verbs == "auto" else verbs
        if verbs != "sim":
            from pytest_mooncake.targets.base import TargetLacks

            raise TargetLacks(Capability.RDMA_CONTROL, f"the reference RDMA handle drives simulated "
                              f"verbs only (--mc-verbs={verbs} asked for another layer)")
        from pytest_mooncake.targets.reference.rdma_handle import ReferenceRdma

        return ReferenceRdma(self.profile, **{**options, "verbs": verbs})

    def close(self) -> None:
        while self._store_clients:
            self._store_clients.pop().stop()
        if self._engines is not None:
            self._engines.close()
            self._engines = None

    @classmethod
    def from_spec(cls, variant: str | None) -> ReferenceTarget:
        profile = variant or "rfc"
        if profile not in PROFILES:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(
                f"unknown reference profile {profile!r}; use reference (= reference:rfc) "
                f"or reference:legacy"
            )
        return cls(profile)

    @property
    def version(self) -> str:
        import reference_engine

        return f"reference-engine {reference_engine.__version__} ({self.profile})"

    @property
    def protocol_version(self) -> str:
        from reference_engine.master.protocol import MASTER_VERSION

        return MASTER_VERSION

    def lack_reason(self, capability: Capability) -> str:
        return f"the reference engine does not implement {capability.value} yet"
