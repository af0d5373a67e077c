"""The one Target of the Mooncake family, over a placement: the mooncake, docker and cluster
targets are this adapter with a local, container or deployment placement (``Placement`` below;
``placements/this_host``, ``placements/containers``, ``placements/existing_cluster``). A placement says where the
family's components are and how a test reaches them, what the target can do there (from its
own probes), and makes the handles.

It owns what must not differ between placements: which options ``start_engine`` and
``master_cluster`` take and how each one a placement cannot honour is refused (``TargetLacks``
naming the option, or ``TypeError`` for one no Mooncake target knows, before anything starts),
which capability each factory needs, and what it records about the build (``facts``)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from typing import Any, Protocol

from pytest_mooncake.targets.base import (
    Capability,
    EngineHandle,
    MasterClusterHandle,
    MasterEndpoint,
    MetadataHandle,
    StoreClientHandle,
    Target,
    TargetContext,
    TargetError,
    TargetLacks,
)
from pytest_mooncake.targets.mooncake.option_rules import (
    ENGINE_OPTIONS,
    check_master_options,
    unknown_options,
)
from pytest_mooncake.targets.mooncake.profile_strategies import (
    DEFAULT_PROFILE,
    PROFILES,
    DeploymentProfile,
    UnknownProfile,
    label_suffix,
    profile_named,
)
from pytest_mooncake.targets.mooncake.store_clients import PROTOCOL
from pytest_mooncake.targets.p2p_deployment import start_deployed


class Placement(Protocol):
    """The strategy a ``MooncakeFamilyTarget`` is built with."""


    kind: str
    """The target kind it serves (``mooncake``, ``docker``, ``cluster``)."""
    variant: str | None
    """What ``--mc-target=KIND:VARIANT`` named (a path, an image, a manifest)."""
    facts: dict[str, Any]
    """What its probes found, for the report header and ``describe()``."""
    engine_options: frozenset[str]
    """``start_engine`` options it can honour (of ``option_rules.ENGINE_OPTIONS``)."""
    master_options: frozenset[str]
    """``master_cluster`` options it can honour (of ``option_rules.MASTER_OPTIONS``)."""
    etcd_routing: str
    """Why it has no per-master etcd routing."""
    fixed: str
    """Why an option it does not honour cannot be honoured here."""

    @property
    def version(self) -> str: ...
    @property
    def capabilities(self) -> frozenset[Capability]: ...
    def lack_reason(self, capability: Capability) -> str: ...
    def open(self, ctx: TargetContext) -> None: ...
    def close(self) -> None: ...
    def metadata_store(self, kind: str) -> MetadataHandle: ...
    def engine(self, segment: str, metadata: MetadataHandle, options: Mapping[str, Any],
               lacks: Mapping[Capability, str]) -> EngineHandle: ...
    def master_cluster(self, masters: int, clients: int,
                       options: Mapping[str, Any]) -> MasterClusterHandle: ...
    def store_client(self, master: MasterEndpoint, client_id: str | None) -> StoreClientHandle: ...
    def describe(self) -> dict[str, Any]: ...



METADATA_KINDS = {"etcd": Capability.METADATA_ETCD, "http": Capability.METADATA_HTTP,
                  "http:reference": Capability.METADATA_HTTP, "redis": Capability.METADATA_REDIS,
                  "p2p": Capability.METADATA_P2P}
_probes = itertools.count(1)


class MooncakeFamilyTarget(Target):
    master_protocol = PROTOCOL
    """mooncake_master's RPC, spoken by ``mooncake.store`` (``store_clients.PROTOCOL``)."""

    def __init__(self, placement: Placement):
        super().__init__(placement.variant)
        self.placement = placement
        self.kind = placement.kind
        self.profile: DeploymentProfile = PROFILES[DEFAULT_PROFILE]

    # ------------------------------------------------------------------ what it is

    def use_profile(self, name: str | None, spec: str = "") -> None:
        """Deploy the build as profile ``name`` (``profile_strategies``; None: the default);
        ``UnknownProfile`` naming the known ones. A placement that deploys nothing itself (the
        cluster target) has its own deployment and refuses every profile."""
        fixed = getattr(self.placement, "own_deployment", None)
        if name is not None and fixed:
            raise UnknownProfile(f"--mc-target={spec}: {fixed}; no @PROFILE applies to it")
        self.profile = profile_named(name, spec)
        self.placement.profile = self.profile

    @property
    def build_label(self) -> str:
        """The build this column judges, without its profile or backends."""
        return super().plain_label

    @property
    def plain_label(self) -> str:
        """``build_label``, then ``@PROFILE`` unless the profile is the default one (the column's
        ``label`` adds its backends, ``Target.label``)."""
        return self.build_label + label_suffix(self.profile)

    def deployment(self) -> dict[str, Any]:
        """The deployment this column judges, as the report records it (the placement's
        ``deployment`` where it has one)."""
        record = getattr(self.placement, "deployment", None)
        out: dict[str, Any] = {"build": self.build_label, "version": self.version,
                               "backends": self.deployment_backends()}
        if record is None:
            return {**out, "profile": self.profile.describe(None)}
        return {**out, **record()}

    @property
    def version(self) -> str:
        return self.placement.version

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        return self.placement.capabilities

    def lack_reason(self, capability: Capability) -> str:
        return self.placement.lack_reason(capability)

    @property
    def facts(self) -> dict[str, Any]:
        return self.placement.facts

    def describe(self) -> Mapping[str, Any]:
        return {**super().describe(), **self.placement.describe()}

    def _require(self, capability: Capability) -> None:
        reason = self.missing(capability)
        if reason:
            raise TargetLacks(capability, reason)

    def _refuse_unhonoured(self, call: str, options: Mapping[str, Any],
                           honoured: frozenset[str], capability: Capability) -> None:
        for name in sorted(options):
            if options[name] is not None and name not in honoured:
                raise TargetLacks(capability, f"{call}({name}=...): {self.label} cannot set "
                                              f"{name} ({self.placement.fixed})")

    # ------------------------------------------------------------------ session

    def open(self, ctx: TargetContext) -> None:
        super().open(ctx)
        self.placement.open(ctx)

    def close(self) -> None:
        self.placement.close()

    def use_verbs(self, mode: str) -> None:
        super().use_verbs(mode)
        use = getattr(self.placement, "use_verbs", None)
        if use is not None:
            use(mode)

    # ------------------------------------------------------------------ factories

    def metadata_store(self, kind: str = "etcd") -> MetadataHandle:
        if kind not in METADATA_KINDS:
            raise ValueError(f"metadata kind {kind!r}: Mooncake targets offer etcd, redis, "
                             f"http, http:reference and p2p")
        self._require(METADATA_KINDS[kind])
        if kind == "p2p":
            make = getattr(self.placement, "p2p_metadata", None)
            if make is None:
                raise TargetLacks(Capability.METADATA_P2P, (
                    f"{self.label}: its placement ({self.placement.fixed}) does not start engines "
                    f"on P2PHANDSHAKE"))
            return make(self.label)
        return self.placement.metadata_store(kind)

    def start_engine(self, segment: str, metadata: MetadataHandle,
                     **options: Any) -> EngineHandle:
        """Options: ``buffer_size``, ``fixed_address``, ``ready_timeout``, ``ttl_ms`` (a build
        with no cache bound lacks cache_ttl: a FAIL where the requirement demands one; a
        placement that cannot set it refuses it as any option) and ``profile`` (only the
        build's own) are refused where the build lacks the means."""
        self._require(Capability.ENGINE)
        unknown_options("start_engine", options, ENGINE_OPTIONS)
        if options.get("ttl_ms") is not None:
            self._refuse_unhonoured("start_engine", {"ttl_ms": options["ttl_ms"]},
                                    self.placement.engine_options, Capability.ENGINE)
            self._require(Capability.CACHE_TTL)
        if options.get("profile") not in (None, "", "mooncake"):
            raise TargetLacks(Capability.VERSION_SKEW, self.lack_reason(Capability.VERSION_SKEW))
        rest = {k: v for k, v in options.items() if k != "profile"}
        self._refuse_unhonoured("start_engine", rest, self.placement.engine_options,
                                Capability.ENGINE)
        lacks = {c: self.lack_reason(c) for c in Capability if c not in self.capabilities}
        engine = start_deployed(lambda name: self.placement.engine(name, metadata, rest, lacks),
                                segment, metadata)
        if "descriptor_fields" not in self.facts:
            self._observe_descriptor(engine.raw_descriptor())
        return engine

    def _observe_descriptor(self, raw: bytes | None) -> dict[str, Any]:
        try:
            desc = json.loads(raw or b"null")
        except ValueError:
            return {}
        if isinstance(desc, dict):
            self.facts["descriptor_fields"] = sorted(desc)
            self.facts["descriptor_has_instance_id"] = "instance_id" in desc
            return desc
        return {}

    def probe_descriptor(self, metadata: MetadataHandle) -> dict[str, Any]:
        """Start one engine, read its published key, stop it: which fields the build publishes."""
        segment = f"mc-probe-{os.getpid()}-{next(_probes)}"
        engine = self.start_engine(segment, metadata)
        try:
            raw = engine.raw_descriptor()
        finally:
            engine.stop()
        desc = self._observe_descriptor(raw)
        return {"key": metadata.segment_key(segment), "fields": sorted(desc),
                "instance_id": "instance_id" in desc}

    def master_cluster(self, masters: int = 2, clients: int = 1,
                       **options: Any) -> MasterClusterHandle:
        options = check_master_options(options, self.version, self.placement.etcd_routing)
        if options.get("snapshots"):
            self._require(Capability.MASTER_SNAPSHOT)
        self._require(Capability.MASTER_CLUSTER)
        self._refuse_unhonoured("master_cluster", options, self.placement.master_options,
                                Capability.MASTER_CLUSTER)
        self._require_ha_backend()
        return self.placement.master_cluster(masters, clients, options)

    def _require_ha_backend(self) -> None:
        """Masters on the deployment's HA backend (``--mc-ha``): etcd as ever; another one only
        where the build's master, started on it in this session, runs (else n/a with what it
        answered: ``backend_probes.master_accepts``)."""
        backend = self.deployment_backends()["ha"]
        if backend == "etcd":
            return
        ask = getattr(self.placement, "ha_backend_answer", None)
        if ask is None:
            raise TargetLacks(Capability.HA_REDIS, f"{self.label} deploys its masters on etcd "
                                                   f"only; --mc-ha={backend} asks for {backend}")
        answer = ask(backend)
        if not answer.accepted:
            raise TargetLacks(Capability.HA_REDIS, answer.answer)
        raise TargetError(
            f"{self.version}'s mooncake_master runs on --ha_backend_type={backend} ({answer.answer}) "
            f"but the mooncake target does not yet start master clusters on it: a harness gap, "
            f"not a verdict")

    def rdma(self, **options: Any) -> Any:
        """The build's engines on a verbs layer the test controls (``emulated_rdma.py``);
        options as ``mc_completions`` passes them (seed, schedules, strategy, replay, verbs)."""
        self._require(Capability.RDMA_CONTROL)
        return self.placement.rdma(options)

    def store_client(self, master: MasterEndpoint, client_id: str | None = None,
                     version: str | None = None, wait_attached: bool = True) -> StoreClientHandle:
        """A real ``mooncake.store`` client of this build attached to ``master``, the masters
        of another Mooncake target (another build, same RPC); it cannot announce a version.
        Stopped with the session's processes at ``close()`` if the caller did not."""
        lacks = self.store_client_lacks(master, version)
        if lacks:
            raise lacks
        if not master.host_reachable and not getattr(self.placement,
                                                     "reaches_container_masters", False):
            raise TargetLacks(Capability.FOREIGN_MASTER, (
                f"the masters of {master.build} are reachable only inside their container "
                f"network; store clients of {self.version} run on this host"))
        return self.placement.store_client(master, client_id)
