"""The remote segment cache: bounded refresh, atomic snapshots, single-flight fetches.

Lookup follows the RFC's table (MR-1..MR-6):

| condition                   | result                                    |
|-----------------------------|-------------------------------------------|
| local segment               | the local snapshot                        |
| remote, within TTL          | the cached snapshot, no I/O               |
| remote, past TTL            | fetch, decode, validate, swap, return new |
| ordinary refresh fails      | the old snapshot (failure counted)        |
| forced refresh              | bypasses the TTL                          |
| forced refresh fails        | ``LookupFailed``, never the stale value   |

Entries are immutable ``(snapshot, refreshed_at_ns)`` pairs in a dict; readers take them without
the lock, writers replace a whole pair under it, so a reader sees one complete snapshot or the
other. The lock is never held across metadata I/O. Per segment at most one fetch runs at a
time; lookups that need a refresh while it runs wait for its result instead of fetching too.
A forced lookup only accepts a fetch that started after it was asked for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from reference_engine.cache_policies import (
    CachePolicy,
    InstanceIdReplacement,
    ReplacementPolicy,
    TtlPolicy,
)
from reference_engine.descriptor import DescriptorError, SegmentDescriptor, decode

log = logging.getLogger("reference_engine.cache")

Fetch = Callable[[str], "bytes | None"]
"""Reads the raw published value of a segment; None when absent; raises on I/O failure."""

COUNTERS = ("refresh_ok", "refresh_failed", "refresh_forced", "snapshots_replaced",
            "replacements", "legacy_peers", "metadata_fetches", "refresh_coalesced")


class LookupFailed(Exception):
    """No usable descriptor: nothing cached and the fetch failed, or a forced refresh failed."""

    def __init__(self, segment: str, reason: str, forced: bool = False):
        self.segment, self.reason, self.forced = segment, reason, forced
        kind = "forced refresh" if forced else "lookup"
        super().__init__(f"{kind} of segment {segment!r} failed: {reason}")


class Counters:
    """Named event counters, safe to bump from any thread."""

    def __init__(self, names: tuple[str, ...] = COUNTERS):
        self._values = dict.fromkeys(names, 0)
        self._lock = threading.Lock()

    def inc(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + by

    def get(self, name: str) -> int:
        return self._values.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    snapshot: SegmentDescriptor
    refreshed_at_ns: int
    """Clock reading when this snapshot was fetched successfully."""
    seq: int = 0
    """The fetch that produced it; a forced lookup accepts only fetches begun after its call."""


class _Flight:
    """One fetch in progress for one segment; waiters block on ``done``."""

    __slots__ = ("seq", "forced", "done", "entry", "error")

    def __init__(self, seq: int, forced: bool):
        self.seq = seq
        self.forced = forced
        self.done = threading.Event()
        self.entry: CacheEntry | None = None
        self.error: str | None = None


class SegmentCache:
    def __init__(
        self,
        fetch: Fetch,
        policy: CachePolicy | None = None,
        replacement: ReplacementPolicy | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        counters: Counters | None = None,
        on_replacement: Callable[[str, SegmentDescriptor, SegmentDescriptor], None] | None = None,
        wait_timeout: float = 10.0,
    ):
        """``wait_timeout``: how long a lookup waits for another lookup's fetch of the same
        segment before it keeps its cached snapshot (MR-4) or fails; a fetch in flight that
        makes progress is not bounded by the store's per-operation timeout (3 s)."""
        self._fetch = fetch
        self.policy = policy if policy is not None else TtlPolicy()
        self._replacement = replacement if replacement is not None else InstanceIdReplacement()
        self._clock = clock
        self.counters = counters if counters is not None else Counters()
        self._on_replacement = on_replacement
        self._wait_timeout = wait_timeout
        self._local: dict[str, SegmentDescriptor] = {}
        self._entries: dict[str, CacheEntry] = {}
        self._flights: dict[str, _Flight] = {}
        self._seq = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ local segments

    def set_local(self, desc: SegmentDescriptor) -> None:
        """Serve ``desc`` for its own name, always, without I/O (MR-1)."""
        self._local[desc.name] = desc

    def set_ttl_ms(self, ttl_ms: float) -> None:
        self.policy.set_ttl_ms(ttl_ms)

    def entry(self, name: str) -> CacheEntry | None:
        return self._entries.get(name)

    # ------------------------------------------------------------------ lookup

    def lookup(self, name: str, force: bool = False) -> SegmentDescriptor:
        """The descriptor of segment ``name`` per the table above."""
        local = self._local.get(name)
        if local is not None:
            return local
        entry = self._entries.get(name)
        if (entry is not None and not force
                and self._clock() - entry.refreshed_at_ns < self.policy.ttl_ns):
            return entry.snapshot
        return self._refresh(name, force and self.policy.honours_force)

    def _fresh(self, entry: CacheEntry | None) -> bool:
        return entry is not None and self._clock() - entry.refreshed_at_ns < self.policy.ttl_ns

    def _refresh(self, name: str, force: bool) -> SegmentDescriptor:
        deadline = time.monotonic() + self._wait_timeout
        ticket: int | None = None
        while True:
            with self._lock:
                if ticket is None:
                    ticket = self._seq
                entry = self._entries.get(name)
                if entry is not None and (entry.seq > ticket if force else self._fresh(entry)):
                    return entry.snapshot  # another flight installed it meanwhile
                flight = self._flights.get(name)
                leader = flight is None
                if leader:
                    self._seq += 1
                    flight = _Flight(self._seq, force)
                    self._flights[name] = flight
            if not leader:
                self.counters.inc("refresh_coalesced")
            if leader:
                self._fly(name, flight, entry)
            elif not flight.done.wait(max(0.0, deadline - time.monotonic())):
                # an ordinary refresh that timed out keeps the previous snapshot (MR-4), also
                # when the fetch it waited for is another lookup's
                current = None if force else (self._entries.get(name) or entry)
                if current is not None:
                    log.warning("lookup of %s waited %.0f s for a metadata fetch still in "
                                "flight; keeping the cached snapshot", name, self._wait_timeout)
                    return current.snapshot
                raise LookupFailed(name, "timed out waiting for a metadata fetch", force)
            if force and flight.seq <= ticket:
                continue  # that fetch began before we asked; it may predate the failure
            return self._outcome(name, flight, entry, force)

    def _outcome(self, name: str, flight: _Flight, old: CacheEntry | None,
                 force: bool) -> SegmentDescriptor:
        if flight.entry is not None:
            return flight.entry.snapshot
        if force:
            raise LookupFailed(name, flight.error or "unknown", forced=True)
        current = self._entries.get(name) or old
        if current is None:
            raise LookupFailed(name, flight.error or "unknown")
        return current.snapshot

    def _fly(self, name: str, flight: _Flight, old: CacheEntry | None) -> None:
        """Fetch, decode, validate, swap; then wake the waiters. Runs without the lock."""
        count = self.counters.inc
        count("metadata_fetches")
        if flight.forced:
            count("refresh_forced")
        try:
            try:
                raw = self._fetch(name)
                if raw is None:
                    raise LookupFailed(name, "no descriptor published", flight.forced)
                desc = decode(raw, name)
                if self.policy.checks_owner and desc.name != name:
                    raise DescriptorError(name, "name", f"the value under this segment's key is "
                                          f"the descriptor of {desc.name!r}")
            except Exception as exc:  # any failure of fetch or decode is a failed refresh
                flight.error = f"{type(exc).__name__}: {exc}"
                count("refresh_failed")
                log.warning("%s refresh of %s failed, %s: %s",
                            "forced" if flight.forced else "ordinary", name,
                            "keeping the cached snapshot" if old and not flight.forced
                            else "no snapshot returned", flight.error)
                return
            new = CacheEntry(desc, self._clock(), flight.seq)
            with self._lock:
                previous = self._entries.get(name)
                self._entries[name] = new
            flight.entry = new
            count("refresh_ok")
            log.debug("refresh of %s ok%s", name, " (forced)" if flight.forced else "")
            prev_snapshot = previous.snapshot if previous else None
            if prev_snapshot is not None and not prev_snapshot.same_resources(desc):
                count("snapshots_replaced")
                log.info("snapshot of %s replaced", name)
            if self._replacement.observe(name, prev_snapshot, desc, count) and \
                    self._on_replacement is not None and prev_snapshot is not None:
                try:
                    self._on_replacement(name, prev_snapshot, desc)
                except Exception:  # the new snapshot stands even if cleanup of the old failed
                    log.exception("retiring resources of the replaced %s failed", name)
        finally:
            with self._lock:
                self._flights.pop(name, None)
            flight.done.set()
