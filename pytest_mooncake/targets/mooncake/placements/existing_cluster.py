"""The ``cluster`` target: an existing deployment described by a cluster file
(``--mc-target=cluster:FILE``; schema ``schemas/cluster_manifest.py``, documented in
the shipped ``pytest_mooncake/data/clusters/example.toml`` and
``nodes-example.toml``).

The file names what exists (etcd endpoints, master admin URLs, engines and store clients with
their control endpoints and protocol) and, where it has ``[[nodes]]`` and ``[[components]]``,
how to drive each on its machine over SSH. What the run may do is the operator's opt-in,
``[faults].allow``: observation and transfers (``observe``, ``transfers``), writes to the
metadata store (``metadata_writes``), metadata traffic through a proxy (``metadata_faults``),
store clients (``store``), and node control per action and kind (``logs``, ``restart``,
``kill``, ``pause``, ``partition``, e.g. ``kill:engine``). Anything not allowed is n/a with the
allow entry that would permit it.

Engines (``deployment/engines_on_nodes``), masters and store clients (``deployment/masters_on_nodes``) are
reached through their control channels (``deployment/control_wires``) and driven on their nodes
(``deployment/node_control``). Names a test uses that are aliases in the file are translated to the
engine's own segment name, in metadata keys and in transfers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_mooncake.schemas.cluster_manifest import (
    ClusterFile,
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
from pytest_mooncake.targets.mooncake.deployment.control_wires import ENGINE_WIRES
from pytest_mooncake.targets.mooncake.deployment.engines_on_nodes import (
    METADATA_VAR,
    DeploymentEngine,
    cache_ttl_lacks,
)
from pytest_mooncake.targets.mooncake.deployment.masters_on_nodes import DeploymentMasters
from pytest_mooncake.targets.mooncake.deployment.node_control import (
    ComponentControl,
    FleetHolder,
    not_allowed,
)
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata


class GuardedMetadata:
    """The deployment's metadata store: reads always, writes only with ``metadata_writes``;
    a segment name a test uses that is an alias in the file means the engine's own."""

    def __init__(self, inner: MetadataHandle, file: ClusterFile):
        self._inner = inner
        self._file = file

    kind = property(lambda self: self._inner.kind)
    uri = property(lambda self: self._inner.uri)
    address = property(lambda self: self._inner.address)

    def _writable(self, what: str) -> None:
        lacks = not_allowed(self._file, "metadata_writes", None,
                            f"{what} in the deployment's etcd", Capability.METADATA_FAULTS)
        if lacks is not None:
            raise lacks

    def get(self, key: str) -> bytes | None:
        return self._inner.get(key)

    def keys(self, prefix: str = "") -> list[str]:
        return self._inner.keys(prefix)

    def segment_key(self, segment: str) -> str:
        return self._inner.segment_key(self._file.segment_name(segment))

    def put(self, key: str, value: bytes) -> None:
        self._writable(f"put {key!r}")
        self._inner.put(key, value)

    def delete(self, key: str) -> bool:
        self._writable(f"delete {key!r}")
        return self._inner.delete(key)

    def through(self, address: str) -> GuardedMetadata:
        lacks = not_allowed(self._file, "metadata_faults", None,
                            f"routing metadata through {address}", Capability.METADATA_FAULTS)
        if lacks is not None:
            raise lacks
        return GuardedMetadata(self._inner.through(address), self._file)

    def close(self) -> None:
        self._inner.close()


# ------------------------------------------------------------------------------- placement


class DeploymentPlacement:
    """An existing deployment: what the file lists, attached to, observed and, where it allows,
    driven on its nodes."""

    kind = "cluster"
    master_options = frozenset({"ready_timeout"})

    def __init__(self, file: ClusterFile):
        self.file = file
        self.variant = str(file.path)
        self.facts: dict[str, Any] = {}
        self.fleet = FleetHolder(file)
        self._caps: frozenset[Capability] | None = None
        self._lacks: dict[Capability, str] = {}
        self.etcd_routing = (f"cluster:{file.path} starts its masters with their own command "
                             f"lines and never chooses their etcd")
        self.fixed = ("its engines run with the command lines the cluster file gives them")

    @property
    def manifest(self) -> ClusterFile:
        return self.file

    @property
    def own_deployment(self) -> str:
        """Why no ``@PROFILE`` applies: the file's own flags are this column's profile."""
        return (f"cluster:{self.file.path} is deployed as its file says (its masters' flags "
                f"and its components' command lines are its profile)")

    def deployment(self) -> dict[str, Any]:
        """The file's own deployment: each master's ``flags`` and the command line of each
        component the file can start."""
        starts = {c.name: c.start or (f"systemd unit {c.unit}" if c.unit else "not started "
                                      "by the run") for c in self.file.components}
        masters = [{"admin": m.admin, "flags": [_flag(k, v) for k, v in m.flags.items()]
                    or "not stated in the cluster file",
                    **({"start": starts[m.component]} if m.component in starts else {})}
                   for m in self.file.masters]
        engines = [{"segment": e.segment, **({"start": starts[e.component]}
                                             if e.component in starts else {})}
                   for e in self.file.engines]
        return {"profile": {"name": "cluster-file", "summary": self.own_deployment,
                            "in_one_line": f"as cluster:{self.file.path} says"},
                "masters": {"each": masters, "ha_backend": "etcd " +
                            ",".join(self.file.etcd.endpoints)},
                "engines": {"each": engines, "metadata_backends": ["etcd"]}}

    @property
    def version(self) -> str:
        return f"cluster {self.file.name} ({self.file.version or 'version not stated'})"

    @property
    def engine_options(self) -> frozenset[str]:
        """``ttl_ms`` where a driven engine can take one (a reference engine's wire sets it; a
        per-test driver engine is started with the settings its entry's ``cache_env`` names):
        an engine started by its own command line keeps the cache bound that line gives it, a
        limit of the deployment (n/a, per engine), not a build without a bound (which would
        FAIL MR-1)."""
        driven = [e for e in self.file.engines if e.control]
        settable = any(cache_ttl_lacks(e, self.file) is None for e in driven)
        return frozenset({"ready_timeout", "ttl_ms"} if settable else {"ready_timeout"})

    @property
    def where(self) -> str:
        return f"cluster:{self.file.path}"

    # ------------------------------------------------------------------ capabilities

    @property
    def capabilities(self) -> frozenset[Capability]:
        if self._caps is None:
            self._lacks = self._probe()
            self._caps = frozenset(c for c in Capability if c not in self._lacks)
        return self._caps

    def lack_reason(self, capability: Capability) -> str:
        _ = self.capabilities
        return self._lacks.get(capability, f"{self.where} offers no means for {capability.value}")

    def _probe(self) -> dict[Capability, str]:
        """Why each capability is missing, from the file (what it lists and allows) and from
        probes of its nodes (each node that runs a linked component answers over SSH)."""
        f, where = self.file, self.where
        lacks: dict[Capability, str] = {}
        driven = [e for e in f.engines if e.control]
        if not f.etcd.endpoints:
            lacks[Capability.METADATA_ETCD] = f"{where} lists no [etcd].endpoints"
        lacks[Capability.METADATA_HTTP] = f"{where} describes an etcd deployment"
        lacks[Capability.METADATA_REDIS] = f"{where} describes an etcd deployment"
        lacks[Capability.HA_REDIS] = f"{where} describes an etcd deployment"
        lacks[Capability.METADATA_P2P] = (f"{where} describes an etcd deployment (its engines "
                                          f"publish to etcd, not by P2P handshake)")
        if Capability.METADATA_ETCD in lacks:
            lacks[Capability.METADATA_STORE] = lacks[Capability.METADATA_ETCD]
        # an engine listed without control is still one the run observes (its descriptor;
        # with a component its process, sockets and log): a suite gets its handle, and what
        # needs driving it is n/a at the call (DeploymentEngine._driven)
        if not f.engines or not f.etcd.endpoints:
            lacks[Capability.ENGINE] = f"{where} lists no [[engines]] (and [etcd])"
        if not driven or not f.etcd.endpoints:
            driving = (f"{where} lists no [[engines]] with a control endpoint (and [etcd]): "
                       f"its engines are observed only")
        elif not f.permits("transfers"):
            driving = f"{where} does not permit transfers (allow = {sorted(f.allow)})"
        else:
            driving = None
        if driving is not None:
            for needs_engine in (Capability.REGISTER_MEMORY, Capability.CACHE_CONTROL,
                                 Capability.CACHE_TTL, Capability.FORCED_REFRESH):
                lacks[needs_engine] = driving
        restart = self._engine_restart_lacks()
        if restart:
            lacks[Capability.ENGINE_RESTART] = restart
        lacks[Capability.KEEP_ADDRESSES] = (
            f"{where}'s engines are started by their components' command lines, which fix "
            f"where they map their buffers")
        for capability in (Capability.CACHE_CONTROL, Capability.CACHE_TTL,
                           Capability.FORCED_REFRESH, Capability.ENGINE_COUNTERS):
            reasons = sorted({ENGINE_WIRES[e.protocol].lacks_by_protocol[capability]
                              for e in driven
                              if capability in ENGINE_WIRES[e.protocol].lacks_by_protocol})
            if reasons or not driven:
                lacks[capability] = "; ".join(reasons) or (driving or "")
        faults = self._metadata_faults_lacks()
        if faults:
            lacks[Capability.METADATA_FAULTS] = faults
        if not f.masters:
            lacks[Capability.MASTER_CLUSTER] = f"{where} lists no [[masters]]"
            lacks[Capability.PROMOTABILITY] = lacks[Capability.MASTER_CLUSTER]
        # with masters, promotability is probed live by the first promotable()
        lacks[Capability.MASTER_SNAPSHOT] = (
            f"{where}: the cluster target has no means to have a deployment's master write a "
            f"snapshot on request")
        lacks[Capability.MASTER_FAULT_PLANTING] = (
            f"{where}: the cluster target has no means to plant an entry in a deployment's "
            f"standby")
        lacks[Capability.VERSION_SKEW] = f"{where} runs the builds it runs; skew pairs come " \
                                         f"from --mc-matrix or mc_skew"
        lacks[Capability.CLIENT_VERSION] = (f"{where}'s store clients announce their own "
                                            f"build's version")
        lacks[Capability.FOREIGN_MASTER] = (f"{where} does not let store clients of another "
                                            f"target attach to its masters")
        lacks[Capability.MASTER_WIRE] = (f"{where}: the cluster target does not hand out "
                                         f"clients of its masters' RPC")
        rdma = f"{where} offers no hook to hold, reorder or replay RDMA completions"
        lacks[Capability.RDMA_CONTROL] = rdma
        lacks[Capability.RDMA_STATE] = (f"{where} offers no view of its engines' RDMA transport "
                                        f"state (slices, endpoint generations, rails)")
        lacks[Capability.SCHEDULER] = rdma
        return lacks

    def _engine_restart_lacks(self) -> str | None:
        f, where = self.file, self.where
        linked = [e for e in f.engines if e.component]
        if not linked:
            return (f"{where} links no engine to a [[components]] entry on a [[nodes]] machine, "
                    f"so it cannot kill or restart one")
        for action in ("kill", "restart"):
            lacks = not_allowed(f, action, "engine", "killing and restarting engines",
                                Capability.ENGINE_RESTART)
            if lacks is not None:
                return lacks.reason
        unstartable = [e.segment for e in linked if not f.component(e.component).startable]
        if len(unstartable) == len(linked):
            return (f"{where}'s engine components ({', '.join(unstartable)}) have no `start` or "
                    f"`unit`: the run could kill them but never start them again")
        unreachable = self._unreachable({e.component for e in linked})
        if unreachable:
            return f"{where}: the nodes of its engines do not answer over SSH: {unreachable}"
        return None

    def _metadata_faults_lacks(self) -> str | None:
        f, where = self.file, self.where
        lacks = not_allowed(f, "metadata_faults", None, "routing metadata through a proxy",
                            Capability.METADATA_FAULTS)
        if lacks is not None:
            return lacks.reason
        routable = [e.segment for e in f.engines
                    if e.lifecycle == "per_test" and e.component
                    and f.component(e.component).reads_env(METADATA_VAR)]
        if not routable:
            return (f"{where}: no engine can have its metadata traffic routed through a proxy "
                    f"(that needs lifecycle = \"per_test\" and a component whose command line "
                    f"reads ${METADATA_VAR})")
        return None

    def _unreachable(self, components: set[str]) -> str:
        seen: dict[str, str | None] = {}
        for name in sorted(components):
            node = self.file.component(name).node
            if node not in seen:
                seen[node] = ComponentControl(self.fleet, name, Capability.ENGINE_RESTART
                                              ).reachable()
        return "; ".join(why for why in seen.values() if why)

    def describe(self) -> dict[str, Any]:
        _ = self.capabilities
        return {"manifest": str(self.file.path), "allow": sorted(self.file.allow),
                "lacks": {c.value: r for c, r in sorted(self._lacks.items())}}

    # ------------------------------------------------------------------ session

    def open(self, ctx: TargetContext) -> None:
        pass

    def close(self) -> None:
        self.fleet.close()

    # ------------------------------------------------------------------ factories

    def metadata_store(self, kind: str) -> MetadataHandle:
        return GuardedMetadata(EtcdMetadata(list(self.file.etcd.endpoints)), self.file)

    def engine(self, segment: str, metadata: MetadataHandle, options: Mapping[str, Any],
               lacks: Mapping[Capability, str]) -> DeploymentEngine:
        """The listed engine named ``segment`` (or aliased so): attached, or started for the
        test (``lifecycle``); its metadata routed through ``metadata`` where that is a proxy."""
        entry = self.file.engine_entry(segment)
        if entry is None:
            known = ", ".join(e.segment for e in self.file.engines) or "none"
            raise TargetLacks(Capability.ENGINE, (
                f"{self.where} lists no engine {segment!r} (listed: {known}; add it to an "
                f"engine's aliases) and never starts an engine it does not list"))
        own = "etcd://" + ";".join(self.file.etcd.endpoints)
        route = metadata.uri if metadata.uri != own else None
        if route is not None:
            why = self._metadata_faults_lacks()
            if why:
                raise TargetLacks(Capability.METADATA_FAULTS, why)
        return DeploymentEngine(entry, self.file, self.fleet, metadata, lacks, route=route,
                                ttl_ms=options.get("ttl_ms"))

    def master_cluster(self, masters: int, clients: int,
                       options: Mapping[str, Any]) -> DeploymentMasters:
        return DeploymentMasters(self.file, self.fleet, self.version, masters, clients)

    def store_client(self, master: MasterEndpoint, client_id: str | None) -> Any:
        raise TargetLacks(Capability.FOREIGN_MASTER, self.lack_reason(Capability.FOREIGN_MASTER))


class ClusterTarget(MooncakeFamilyTarget):
    """``--mc-target=cluster:FILE``: the family adapter with a ``DeploymentPlacement``."""

    kind = "cluster"

    def __init__(self, file: ClusterFile):
        super().__init__(DeploymentPlacement(file))

    @property
    def manifest(self) -> ClusterFile:
        return self.placement.file

    @property
    def toxiproxy_url(self) -> str | None:
        """The Toxiproxy that fronts the deployment (``[toxiproxy].url``): the session's
        fault proxy unless ``--mc-toxiproxy`` names another."""
        return self.manifest.toxiproxy.url

    def peer_etcd(self) -> list[str] | None:
        """The etcd components started beside the deployment for a test (a skew role) must
        use, so its engines and theirs find each other: the file's ``[etcd].endpoints``."""
        return list(self.manifest.etcd.endpoints) or None

    def peer_host(self, who: str) -> str:
        """Where components started on this host for a test beside the deployment (a skew role)
        must listen: ``[cluster].controller_address``; n/a when the file does not say."""
        address = self.manifest.cluster.controller_address
        if address is None:
            raise TargetLacks(Capability.VERSION_SKEW, (
                f"{who}: cluster:{self.manifest.path} does not say at which address its nodes "
                f"reach this host ([cluster].controller_address), so components started here "
                f"beside it would be unreachable"))
        return address

    @classmethod
    def from_spec(cls, variant: str | None) -> ClusterTarget:
        from pytest_mooncake.targets import UnknownTarget

        if not variant:
            raise UnknownTarget("the cluster target needs a cluster file: "
                                "--mc-target=cluster:FILE (see the shipped example: "
                                "cluster:example, pytest_mooncake/data/clusters/example.toml)")
        try:
            return cls(load_manifest(variant))
        except ManifestError as exc:
            raise UnknownTarget(str(exc)) from None


def _flag(name: str, value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f"--{name}={text}"
