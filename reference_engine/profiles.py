"""The profile registry: ``rfc`` (the RFCs' behaviour) and ``legacy`` (Mooncake 0.3.13's), each a
bundle of the strategies every layer uses.

A layer takes its strategies from its profile and never asks which profile it has:

- ``identity``: whether a process publishes an ``instance_id`` (MR-7, MR-8; ``identity``);
- ``engine``: the segment cache's policy, what a changed ``instance_id`` means, and how many times
  a failed transfer is retried after a forced refresh (``cache_policies``);
- ``rdma``: completion ownership, endpoint retirement, worker model, peer tracking
  (``rdma.rdma_policies``);
- ``master_policies(...)``: a master's baseline, promotability, promotion, version gate and lag
  metric; ``reattach_policy(...)``: what a store client does when its master is gone
  (``master.master_policies``). Both are built per process from its options.

The names are what ``--profile`` accepts; nothing compares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reference_engine.cache_policies import (
    DEFAULT_TTL_MS,
    CachePolicy,
    IgnoreIdentity,
    InstanceIdReplacement,
    NeverExpirePolicy,
    ReplacementPolicy,
    TtlPolicy,
)
from reference_engine.identity import IdentityPolicy, NoInstanceId, PublishInstanceId
from reference_engine.master.master_policies import (
    BoundedReattach,
    CompatibleVersionGate,
    ExactVersionOnWrites,
    HonestPromotability,
    LagMetric,
    MasterPolicies,
    PromoteThenValidate,
    ReattachPolicy,
    ReplayBaseline,
    StalledReattach,
    ValidateBeforePromotion,
    WatchForwardBaseline,
    WatchingPromotability,
    ZeroLagMetric,
)
from reference_engine.rdma.peer_state import InstanceTracking, NoTracking
from reference_engine.rdma.rdma_policies import (
    RdmaPolicies,
    ScatteredDeletion,
    SliceOwnership,
    TokenOwnership,
    UnifiedRetire,
)


@dataclass(frozen=True)
class EnginePolicies:
    """The engine's and its segment cache's strategies."""

    retry_budget: int
    """Retries of a failed transfer, each after a forced refresh (MR-12); 0 = fail at once."""
    make_cache_policy: Callable[[float | None], CachePolicy]
    replacement: ReplacementPolicy

    def cache_policy(self, ttl_ms: float | None = None) -> CachePolicy:
        """A fresh cache policy (one per cache: a TTL policy's TTL can be changed at run time)."""
        return self.make_cache_policy(ttl_ms)


MakeMasterPolicies = Callable[[bool, "float | None", float], MasterPolicies]
"""(partial_restore, warmup_seconds, lease_ttl) -> the strategies of one master."""


@dataclass(frozen=True)
class Profile:
    name: str
    identity: IdentityPolicy
    engine: EnginePolicies
    rdma: RdmaPolicies
    make_master_policies: MakeMasterPolicies
    make_reattach_policy: Callable[[float], ReattachPolicy]

    def master_policies(self, partial_restore: bool = False, warmup_seconds: float | None = None,
                        lease_ttl: float = 2.0) -> MasterPolicies:
        """``partial_restore``: promote dropping invalid entries (rfc); ``warmup_seconds``: the
        leader's warm-up before serving (legacy; default: the lease TTL)."""
        return self.make_master_policies(partial_restore, warmup_seconds, lease_ttl)

    def reattach_policy(self, stall_seconds: float = 121.0) -> ReattachPolicy:
        """``stall_seconds``: how long a legacy client keeps waiting on a dead master."""
        return self.make_reattach_policy(stall_seconds)


def _rfc_master(partial_restore: bool, warmup_seconds: float | None,
                lease_ttl: float) -> MasterPolicies:
    return MasterPolicies(ReplayBaseline(), HonestPromotability(),
                          ValidateBeforePromotion(partial_restore), CompatibleVersionGate(),
                          LagMetric())


def _legacy_master(partial_restore: bool, warmup_seconds: float | None,
                   lease_ttl: float) -> MasterPolicies:
    warmup = lease_ttl if warmup_seconds is None else warmup_seconds
    return MasterPolicies(WatchForwardBaseline(), WatchingPromotability(),
                          PromoteThenValidate(warmup), ExactVersionOnWrites(), ZeroLagMetric())


RFC = Profile(
    name="rfc",
    identity=PublishInstanceId(),
    engine=EnginePolicies(
        retry_budget=2,
        make_cache_policy=lambda ttl: TtlPolicy(DEFAULT_TTL_MS if ttl is None else ttl),
        replacement=InstanceIdReplacement(),
    ),
    rdma=RdmaPolicies(dedicated_poller_default=False, make_ownership=TokenOwnership,
                      retire=UnifiedRetire(), make_peer_tracking=InstanceTracking),
    make_master_policies=_rfc_master,
    make_reattach_policy=lambda stall_seconds: BoundedReattach(),
)

LEGACY = Profile(
    name="legacy",
    identity=NoInstanceId(),
    engine=EnginePolicies(retry_budget=0, make_cache_policy=NeverExpirePolicy,
                          replacement=IgnoreIdentity()),
    rdma=RdmaPolicies(dedicated_poller_default=True, make_ownership=SliceOwnership,
                      retire=ScatteredDeletion(), make_peer_tracking=NoTracking),
    make_master_policies=_legacy_master,
    make_reattach_policy=StalledReattach,
)

PROFILES = {p.name: p for p in (RFC, LEGACY)}
"""Name -> profile, in the order ``--profile`` lists them."""


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None


def resolve_profile(profile: str | Profile) -> Profile:
    """A profile given by name or as itself (tests build variants with ``dataclasses.replace``)."""
    return profile if isinstance(profile, Profile) else get_profile(profile)
