"""How a real build's remote segment cache is bounded, from the outside: ``ttl_ms`` becomes the
environment an engine's driver runs with.

Mooncake has no ``metadata_cache_ttl_ms``. 0.3.12 and later read
``MC_TE_METADATA_REFRESH_INTERVAL_SECONDS``: a background thread re-fetches every cached remote
descriptor every N whole seconds (a fraction is silently ignored, so ``ttl_ms`` is rounded up);
off by default, when a cached descriptor is served for ever. Every release reads
``MC_DISABLE_METACACHE``: no cache at all, every lookup fetches (``ttl_ms=0``). Which of the two
a build reads is probed in the run (``ReleaseFacts.reads_env``: the ``MC_*`` names stored in
its ELF files), never assumed from its version.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

REFRESH_ENV = "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS"
NO_CACHE_ENV = "MC_DISABLE_METACACHE"


@dataclass(frozen=True)
class CacheKnobs:
    """The cache settings one build reads (probed) and the environment for a TTL."""

    reads: frozenset[str]
    """The cache ``MC_*`` names found in the build's ELF files."""
    build: str

    @classmethod
    def of(cls, engine_env: Iterable[str], build: str) -> CacheKnobs:
        return cls(frozenset(engine_env), build)

    def missing(self) -> str | None:
        """Why no TTL can be set on this build (None: it reads the refresh interval)."""
        if REFRESH_ENV in self.reads:
            return None
        return (f"mooncake.engine of {self.build} has no metadata_cache_ttl_ms and does not read "
                f"{REFRESH_ENV} (not among the MC_* names in its ELF files): its remote "
                f"segment cache serves a descriptor for ever once fetched")

    def env_for(self, ttl_ms: float) -> dict[str, str]:
        """The environment that bounds the cache at ``ttl_ms`` (rounded up to whole seconds;
        0: no cache where the build can turn it off)."""
        if ttl_ms < 0 or math.isnan(ttl_ms):
            raise ValueError(f"ttl_ms must be >= 0, got {ttl_ms}")
        if ttl_ms == 0 and NO_CACHE_ENV in self.reads:
            return {NO_CACHE_ENV: "1"}
        return {REFRESH_ENV: str(max(1, math.ceil(ttl_ms / 1000)))}


def bound_ms(env: Mapping[str, str]) -> float | None:
    """How long an engine started with ``env`` serves a cached remote descriptor at most, as
    the build reads that environment: 0 without a cache, the refresh interval, or None."""
    if NO_CACHE_ENV in env:
        return 0.0
    try:
        seconds = int(env.get(REFRESH_ENV, "0"))
    except ValueError:  # the build's own parser ignores what is not a whole number
        return None
    return seconds * 1000.0 if seconds > 0 else None
