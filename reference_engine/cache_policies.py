"""The segment cache's strategies: how long a remote descriptor stays fresh and whether a
forced refresh is honoured (cache policy), and what a changed ``instance_id`` means (replacement
policy). The profile registry (``reference_engine.profiles``) picks one of each per profile.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

from reference_engine.descriptor import SegmentDescriptor

DEFAULT_TTL_MS = 1000.0

log = logging.getLogger("reference_engine.cache")


class CachePolicy(Protocol):
    """How the segment cache treats remote entries."""

    ttl_ns: float
    """A remote entry younger than this is served without I/O (``inf`` = never expires)."""
    honours_force: bool
    """Whether a forced lookup bypasses the cache."""
    checks_owner: bool
    """Whether a fetched descriptor must name the segment it was looked up as (a value of
    another segment planted under the key is then rejected like any invalid value, MR-3/MR-4)."""

    def set_ttl_ms(self, ttl_ms: float) -> None: ...


class TtlPolicy:
    """RFC: remote entries expire ``ttl_ms`` after their last successful refresh (MR-1, MR-5)."""

    honours_force = True
    checks_owner = True

    def __init__(self, ttl_ms: float = DEFAULT_TTL_MS):
        self.set_ttl_ms(ttl_ms)

    def set_ttl_ms(self, ttl_ms: float) -> None:
        if ttl_ms < 0 or math.isnan(ttl_ms):
            raise ValueError(f"metadata_cache_ttl_ms must be >= 0, got {ttl_ms}")
        self.ttl_ms = ttl_ms
        self.ttl_ns = ttl_ms * 1e6


class NeverExpirePolicy:
    """0.3.13: a mapped segment is never refetched, forced or not (observed on the wheel)."""

    honours_force = False
    checks_owner = False
    """0.3.13 installs whatever the segment's key holds."""
    ttl_ns = math.inf

    def __init__(self, ttl_ms: float | None = None):
        self.requested_ttl_ms = ttl_ms

    def set_ttl_ms(self, ttl_ms: float) -> None:
        """Recorded and ignored: 0.3.13 has no TTL."""
        self.requested_ttl_ms = ttl_ms


Count = Callable[[str], None]


class ReplacementPolicy(Protocol):
    """What a newly installed snapshot means for the peer's derived resources."""

    def observe(self, name: str, old: SegmentDescriptor | None, new: SegmentDescriptor,
                count: Count) -> bool:
        """Return True when ``new`` comes from a different process incarnation than ``old``."""
        ...


class InstanceIdReplacement:
    """RFC: a changed ``instance_id`` is a replacement (MR-9, MR-10); no ID is a legacy peer."""

    def observe(self, name: str, old: SegmentDescriptor | None, new: SegmentDescriptor,
                count: Count) -> bool:
        if new.instance_id is None:
            if old is None or old.instance_id is not None:
                count("legacy_peers")
                log.info("legacy peer %s: descriptor carries no instance_id", name)
            return False
        if old is None or old.instance_id is None or old.instance_id == new.instance_id:
            return False
        count("replacements")
        log.warning("replacement of %s observed: instance %s -> %s",
                    name, old.instance_id, new.instance_id)
        return True


class IgnoreIdentity:
    """0.3.13: the descriptor's identity is never looked at."""

    def observe(self, name: str, old: SegmentDescriptor | None, new: SegmentDescriptor,
                count: Count) -> bool:
        return False
