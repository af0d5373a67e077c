"""The shared part of the placements that start the family's processes themselves (on this
host, in containers): engines in driver processes, HA masters and store clients, all started
through the placement's launcher."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import ProbeFailed
from pytest_mooncake.targets.base import (
    Capability,
    MasterEndpoint,
    MetadataHandle,
    StoreClientHandle,
    TargetContext,
    TargetError,
)
from pytest_mooncake.targets.mooncake import judged_configuration
from pytest_mooncake.targets.mooncake.cache_knobs import CacheKnobs
from pytest_mooncake.targets.mooncake.driver.engine_proxies import MooncakeEngine
from pytest_mooncake.targets.mooncake.launchers import Launcher
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.ha_processes import MooncakeMasterCluster
from pytest_mooncake.targets.mooncake.option_rules import (
    ENGINE_OPTIONS,
    MASTER_OPTIONS,
    MOONCAKE_ETCD_ROUTING,
)
from pytest_mooncake.targets.mooncake.profile_strategies import (
    DEFAULT_PROFILE,
    PROFILES,
    DeploymentProfile,
)
from pytest_mooncake.targets.mooncake.store_clients import PROTOCOL, start_store_client

_counter = itertools.count(1)


class ProcessPlacement:
    """A placement that starts the family's processes itself, through a launcher: engines in
    driver processes, HA masters, store clients. Subclasses give the launcher, the etcd the
    masters use, and the engine readiness bound."""

    kind: str
    engine_options = frozenset(ENGINE_OPTIONS)
    master_options = frozenset(MASTER_OPTIONS)
    engine_ready_timeout = 30.0
    fixed = ""
    etcd_routing = MOONCAKE_ETCD_ROUTING
    """Why a master cannot be given etcd endpoints of its own ("": it can)."""
    ctx: TargetContext | None = None
    cache_knobs: CacheKnobs | None = None
    """The cache settings the build reads (set by the capability probe; None: none known)."""
    profile: DeploymentProfile = PROFILES[DEFAULT_PROFILE]
    """How its masters are deployed (``MooncakeFamilyTarget.use_profile`` sets it)."""

    def launcher(self) -> Launcher:
        raise NotImplementedError

    def master_flags(self) -> MasterFlags:
        """The build's master flags (``ProbeFailed``/``TargetError`` where not known)."""
        return self.launcher().master_flags

    def deployment(self) -> dict[str, Any]:
        """What this column deploys (``judged_configuration``), from the build's probed flags
        and the cache knobs its engines read."""
        try:
            flags, unknown = self.master_flags(), ""
        except (ProbeFailed, TargetError, OSError) as exc:
            flags, unknown = None, str(exc)
        launcher_class = self.launcher_class()
        knobs = sorted(self.cache_knobs.reads) if self.cache_knobs is not None else None
        return judged_configuration.record(self.profile, flags, launcher_class.bind_host,
                                        dict(launcher_class.master_rpc), knobs, unknown)

    def launcher_class(self) -> Any:
        """The launcher's class (its bind host and master RPC settings), without starting
        anything."""
        raise NotImplementedError

    def master_etcd(self) -> list[str]:
        """Endpoints of the etcd masters and store clients elect and find a leader on."""
        raise NotImplementedError

    @property
    def workdir(self) -> Path:
        if self.ctx is None:
            raise TargetError(f"the {self.kind} target was not opened (no session context)")
        return Path(self.ctx.workdir)

    def open(self, ctx: TargetContext) -> None:
        self.ctx = ctx

    def engine(self, segment: str, metadata: MetadataHandle, options: Mapping[str, Any],
               lacks: Mapping[Capability, str]) -> MooncakeEngine:
        ttl_ms = options.get("ttl_ms")
        env = {} if ttl_ms is None or self.cache_knobs is None else self.cache_knobs.env_for(
            float(ttl_ms))
        return MooncakeEngine(
            self.launcher(), self.workdir, segment, metadata, lacks, env=env,
            buffer_size=int(options.get("buffer_size") or 1 << 20),
            fixed_address=int(options.get("fixed_address") or 0),
            ready_timeout=float(options.get("ready_timeout") or self.engine_ready_timeout))

    def master_cluster(self, masters: int, clients: int,
                       options: Mapping[str, Any]) -> MooncakeMasterCluster:
        launcher = self.launcher()
        return MooncakeMasterCluster(launcher, self.workdir / f"cluster-{next(_counter)}",
                                     self.master_etcd(), masters=masters, clients=clients,
                                     profile=self.profile, etcd_routing=self.etcd_routing,
                                     **options)

    def store_client(self, master: MasterEndpoint, client_id: str | None) -> StoreClientHandle:
        n = next(_counter)
        workdir = self.workdir / f"store-client-{n}"
        workdir.mkdir(parents=True, exist_ok=True)
        return start_store_client(self.launcher(), workdir, list(master.etcd), master.cluster_id,
                                  n, client_id, 30.0, master=master.address_for(PROTOCOL))
