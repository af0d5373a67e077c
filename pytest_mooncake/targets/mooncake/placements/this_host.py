"""The ``mooncake`` target: a real Mooncake build (pip wheel or install directory), its
components as processes on this host.

Engines and store clients run in driver processes (``driver/mooncake_driver.py``) with the build's python;
masters are the build's ``mooncake_master`` binary, all under the session's supervisor, bound to
loopback. What the build can do is probed, not assumed: ``driver/mooncake_driver.py probe`` lists its Python API
and binaries once per session, and every capability the API has no means for is absent with a
reason naming what is missing.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import ProbeFailed, ReleaseFacts
from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import Supervisor, port_open
from pytest_mooncake.targets.base import (
    Capability,
    MetadataHandle,
    TargetContext,
    TargetError,
    TargetLacks,
)
from pytest_mooncake.targets.mooncake.adapter import MooncakeFamilyTarget
from pytest_mooncake.targets.mooncake.backend_probes import (
    BackendAnswer,
    engine_accepts,
    master_accepts,
)
from pytest_mooncake.targets.mooncake.cache_knobs import NO_CACHE_ENV, REFRESH_ENV, CacheKnobs
from pytest_mooncake.targets.mooncake.driver.engine_proxies import P2P_PORT_ENV
from pytest_mooncake.targets.mooncake.emulated_rdma import MooncakeRdma
from pytest_mooncake.targets.mooncake.install import (
    MooncakeInstall,
    SpecError,
    locate,
    locate_release,
)
from pytest_mooncake.targets.mooncake.launchers import LocalLauncher
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.snapshot_requests import (
    lack as snapshot_means_lack,
)
from pytest_mooncake.targets.mooncake.metadata_stores import (
    EtcdMetadata,
    HttpMetadata,
    RedisMetadata,
)
from pytest_mooncake.targets.mooncake.placements.spawned import ProcessPlacement
from pytest_mooncake.targets.mooncake.verbs_layers import VerbsLayer, verbs_layer
from pytest_mooncake.targets.p2p_deployment import P2P_URI, P2pDirectory, P2pMetadata

ENGINE_API = ("initialize", "register_memory", "transfer_sync_write", "transfer_sync_read",
              "get_first_buffer_address")
FORCED_API = ("sync_segment_cache", "refresh_segment", "force_refresh")
COUNTER_API = re.compile(r"^(get_)?(stats|metrics|counters)$")
RDMA_STATE_API = re.compile(r"(slice|endpoint|rail|token|qp)", re.I)
STORE_API = ("setup", "put", "get", "is_exist", "remove")


class LocalPlacement(ProcessPlacement):
    """Processes of an installed build on this host, under the session's supervisor."""

    kind = "mooncake"
    etcd_routing = ""
    """Routes: its masters run on this host and reach whatever the test reaches (a fault proxy
    on 127.0.0.1 in front of the run's etcd), so a master may be given its own endpoints."""

    def __init__(self, install: MooncakeInstall, variant: str | None = None):
        self.install = install
        self.variant = variant
        self.facts: dict[str, Any] = {}
        self._caps: frozenset[Capability] | None = None
        self._lacks: dict[Capability, str] = {}
        self._supervisor: Supervisor | None = None
        self._facts: ReleaseFacts | None = None
        self.verbs: VerbsLayer = verbs_layer("auto")

    def use_verbs(self, mode: str) -> None:
        """The verbs layer of the RDMA engines this placement starts (``--mc-verbs``)."""
        self.verbs = verbs_layer(mode)
        self.facts["verbs"] = self.verbs.mode
        self._caps = None

    def rdma(self, options: dict[str, Any]) -> MooncakeRdma:
        """Engines on emulated RDMA devices, controlled through their verbs sockets."""
        _ = self.capabilities
        return MooncakeRdma(self, self.verbs, self._lacks, int(options.get("seed") or 0),
                            self.facts.get("probe", {}).get("package_dir"),
                            schedules=options.get("schedules"), strategy=options.get("strategy"),
                            replay=options.get("replay"))

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

    def release_facts(self) -> ReleaseFacts:
        """The build's probed facts (``releases.facts_of``), live master start included."""
        if self._facts is None:
            self._facts = self.install.facts(live=True)
        return self._facts

    def _probe_capabilities(self) -> tuple[frozenset[Capability], dict[Capability, str]]:
        lacks: dict[Capability, str] = {}
        if self.install.missing:
            return frozenset(), {c: self.install.missing for c in Capability}
        facts = self.release_facts()
        api = facts.data["static"]["python_api"]
        if "error" in api:
            return frozenset(), {c: api["error"] for c in Capability}
        ver = self.install.version
        engine, engine_error = _methods(facts, "engine")
        store, store_error = _methods(facts, "store")
        master = self.install.build.master_binary
        self.facts["probe"] = {
            "engine_methods": sorted(engine), "store_methods": sorted(store),
            "binaries": {"mooncake_master": str(master) if master else None},
            "package_dir": str(self.install.build.package_dir),
            "master_starts": facts.master_starts if master else None,
            "libraries": self.install.libraries}
        missing_engine = [m for m in ENGINE_API if m not in engine]
        if engine_error or missing_engine:
            why = engine_error or f"TransferEngine lacks {', '.join(missing_engine)}"
            for cap in (Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
                        Capability.METADATA_ETCD, Capability.METADATA_HTTP,
                        Capability.METADATA_REDIS, Capability.METADATA_P2P, Capability.METADATA_FAULTS, Capability.REGISTER_MEMORY):
                lacks[cap] = f"mooncake.engine of {ver} is unusable: {why}"
        if Capability.ENGINE in lacks:
            lacks[Capability.CACHE_CONTROL] = lacks[Capability.ENGINE]
        self.cache_knobs = CacheKnobs.of(
            [name for name in (REFRESH_ENV, NO_CACHE_ENV) if facts.reads_env(name)], ver)
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
        if not api.get("http_metadata_server") and Capability.METADATA_HTTP not in lacks:
            lacks[Capability.METADATA_HTTP] = (
                f"{ver} has no usable mooncake.http_metadata_server: "
                f"{api.get('http_metadata_server_error', 'module missing')}")
        control = self.verbs.control_lacks(ver)
        if control:
            lacks[Capability.RDMA_CONTROL] = control
        elif Capability.ENGINE in lacks:
            lacks[Capability.RDMA_CONTROL] = lacks[Capability.ENGINE]
        state_api = sorted(m for m in engine if RDMA_STATE_API.search(m))
        lacks[Capability.RDMA_STATE] = (
            f"mooncake.engine of {ver} shows none of its RDMA transport's state (slice attempts "
            f"and retry counts, endpoint generations and retire causes, rail state, queued "
            f"slices, completion tokens): TransferEngine has "
            + (f"only {', '.join(state_api)}" if state_api else "no method for any of them")
            + "; its NICs are observed instead")
        if Capability.RDMA_CONTROL in lacks:  # no emulated verbs: no scheduling points either
            lacks[Capability.SCHEDULER] = (
                f"{ver}'s RDMA worker pool runs free threads inside its own process, and without "
                f"emulated verbs nothing parks them at their verbs calls: "
                f"{lacks[Capability.RDMA_CONTROL]}")
        if master is None:
            lacks[Capability.MASTER_CLUSTER] = f"{ver} ships no mooncake_master binary"
        elif store_error or not set(STORE_API) <= store:
            lacks[Capability.MASTER_CLUSTER] = (
                f"mooncake.store of {ver} is unusable: "
                f"{store_error or 'MooncakeDistributedStore lacks ' + ', '.join(sorted(set(STORE_API) - store))}")
        no_snapshot = lacks.get(Capability.MASTER_CLUSTER) or snapshot_lack(facts, ver)
        if no_snapshot:
            lacks[Capability.MASTER_SNAPSHOT] = no_snapshot
        lacks[Capability.VERSION_SKEW] = (
            f"the mooncake target runs one build ({ver}); skew pairs come from --mc-matrix")
        lacks[Capability.CLIENT_VERSION] = (
            f"mooncake.store of {ver} announces its own build; it has no means to announce "
            f"version another build would (no client option sets it)")
        if Capability.MASTER_CLUSTER in lacks:
            lacks[Capability.FOREIGN_MASTER] = lacks[Capability.MASTER_CLUSTER]
            lacks[Capability.MASTER_WIRE] = lacks[Capability.MASTER_CLUSTER]
            lacks[Capability.PROMOTABILITY] = lacks[Capability.MASTER_CLUSTER]
            lacks[Capability.MASTER_FAULT_PLANTING] = lacks[Capability.MASTER_CLUSTER]
        # planting is probed live too: plant_bad_descriptor reads the OpLog the running masters
        # keep in etcd and raises TargetLacks with what it found where there is none it can write
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
        """Components run as local processes under the session supervisor; masters with the
        flags the build's ``mooncake_master --help`` lists."""
        return LocalLauncher(self.install, self.supervisor(), self.release_facts())

    def master_etcd(self) -> list[str]:
        return list(self.ctx.etcd_endpoints())

    def master_flags(self) -> MasterFlags:
        """The flags the build's ``mooncake_master --help`` lists (probed once, cached)."""
        if self.install.missing:
            raise ProbeFailed(self.install.missing)
        return MasterFlags.of(self.release_facts())

    def launcher_class(self) -> type[LocalLauncher]:
        return LocalLauncher

    def deployment(self) -> dict[str, Any]:
        """``ProcessPlacement.deployment``; the cache knobs the build reads are probed first."""
        if self._caps is None and not self.install.missing:
            try:
                _ = self.capabilities
            except (ProbeFailed, OSError):
                pass
        record = super().deployment()
        build = self.install.build
        if build is not None:
            master = build.master_binary
            record["binaries"] = {"mooncake_master": str(master) if master else None,
                                  "python (drivers of engines and store clients)":
                                      self.install.python,
                                  "distribution": f"{self.install.dist_name} "
                                                  f"{self.install.dist_version}"}
        return record

    # ------------------------------------------------------------------ metadata

    def metadata_store(self, kind: str) -> MetadataHandle:
        if kind == "http":
            return self.start_http_metadata()
        if kind == "http:reference":
            return self.start_reference_http_metadata()
        if kind == "redis":
            return self.redis_metadata()
        return EtcdMetadata(self.master_etcd())

    def p2p_metadata(self, label: str) -> P2pMetadata:
        """Engines on P2PHANDSHAKE, once the build showed its engine initialises on it
        (``backend_probes.engine_accepts``); else n/a with what the build answered. A build
        that does not read ``MC_MIN_RPC_PORT`` (its files do not name it) draws its RPC port
        from 15000..17000 whatever the run asks, so no engine of it can be put at a name the
        test keeps across restarts: n/a saying so."""
        if not self.release_facts().reads_env(P2P_PORT_ENV):
            raise TargetLacks(Capability.METADATA_P2P, (
                f"{self.install.version} does not read {P2P_PORT_ENV} (its files do not name "
                f"it): in P2PHANDSHAKE mode it draws its RPC port, and so its segment name, at "
                f"random from 15000..17000, so the run cannot place its engines at a host:port"))
        answer = engine_accepts(self.install, P2P_URI, self.workdir)
        if not answer.accepted:
            raise TargetLacks(Capability.METADATA_P2P, answer.answer)
        return P2pMetadata(label, P2pDirectory(span=3), accepted=answer.answer)

    def ha_backend_answer(self, backend: str) -> BackendAnswer:
        """What the build's ``mooncake_master --enable_ha --ha_backend_type=BACKEND`` does on
        the session's server of that backend (``backend_probes.master_accepts``)."""
        if backend == "redis":
            connstring = f"redis://{self.ctx.redis_address()}"
        else:
            connstring = ";".join(self.master_etcd())
        return master_accepts(self.install, backend, connstring, self.workdir)

    def redis_metadata(self) -> RedisMetadata:
        """The session Redis, once the build showed its engine initialises on ``redis://``
        (``backend_probes.engine_accepts``); else n/a with what the build answered."""
        address = self.ctx.redis_address()
        answer = engine_accepts(self.install, f"redis://{address}", self.workdir)
        if not answer.accepted:
            raise TargetLacks(Capability.METADATA_REDIS, answer.answer)
        return RedisMetadata(address)

    def start_reference_http_metadata(self) -> HttpMetadata:
        """The reference engine's HTTP metadata server (``python -m reference_engine
        metadata-server``, the same API as the wheel's) on a free loopback port: the build's
        engines against another implementation of the HTTP metadata API."""
        port = free_port()
        root = str(Path(__file__).resolve().parents[4])  # the checkout: importable uninstalled
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        proc = self.supervisor().start(
            f"reference-http-metadata-{port}",
            [sys.executable, "-m", "reference_engine", "metadata-server", "--listen",
             f"127.0.0.1:{port}"],
            env=dict(os.environ, PYTHONPATH=path), ready=port_open(port), ready_timeout=30)
        return self._releasing(HttpMetadata(f"127.0.0.1:{port}", process=proc), port)

    def _releasing(self, handle: HttpMetadata, port: int) -> HttpMetadata:
        close = handle.close

        def close_and_release() -> None:
            close()
            release_port(port)

        handle.close = close_and_release  # type: ignore[method-assign]
        return handle

    def start_http_metadata(self) -> HttpMetadata:
        """The wheel's own HTTP metadata server on a free loopback port."""
        port = free_port()
        proc = self.supervisor().start(
            f"mooncake-http-metadata-{port}",
            [self.install.python, "-m", "mooncake.http_metadata_server", "--host", "127.0.0.1",
             "--port", str(port)],
            env=self.install.env(), ready=port_open(port), ready_timeout=30)
        return self._releasing(HttpMetadata(f"127.0.0.1:{port}", process=proc), port)


def _say(message: str) -> None:
    print(f"pytest-mooncake: releases: {message}", file=sys.stderr, flush=True)


def _methods(facts: ReleaseFacts, which: str) -> tuple[frozenset[str], str | None]:
    """The build's TransferEngine / MooncakeDistributedStore methods, or the import error."""
    try:
        return (facts.engine_methods if which == "engine" else facts.store_methods), None
    except ProbeFailed as exc:
        return frozenset(), str(exc)


def snapshot_lack(facts: ReleaseFacts, ver: str) -> str | None:
    """Why the Mooncake targets cannot have ``ver``'s masters write a snapshot on request and
    start from it, from the flags its ``mooncake_master --help`` lists (``master_cluster/snapshot_requests``);
    None when one means is complete."""
    try:
        flags = facts.master_flags
    except ProbeFailed as exc:
        return f"{ver} offers no means to have a snapshot written on request: {exc}"
    return snapshot_means_lack(flags, ver, family.PROBES["master_flag"])


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

    @classmethod
    def from_release(cls, text: str) -> MooncakeTarget:
        """``--mc-target=mooncake==VERSION`` (any form ``releases.spec`` accepts): that release
        in its own cached environment, installed first if needed (progress on stderr)."""
        try:
            install = locate_release(text, progress=_say)
        except SpecError as exc:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(str(exc)) from None
        return cls(install)

    @property
    def build_label(self) -> str:
        """``mooncake``, ``mooncake:SPEC``, or for a release ``mooncake-FLAVOUR==VERSION``."""
        release = self.placement.install.release
        return str(release) if release is not None else super().build_label

    @property
    def notes(self) -> str:
        return self.placement.install.libraries

    @property
    def install(self) -> MooncakeInstall:
        return self.placement.install

    @property
    def supervisor(self) -> Supervisor | None:
        return self.placement._supervisor
