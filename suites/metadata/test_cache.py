"""MR-1..MR-6: the bounded metadata cache (stage 1 of the metadata RFC).

Validation scenarios 1 (refresh after TTL, not before), 2 (a transport failure bypasses TTL, here
as a forced refresh) and 7 (no partial snapshot under concurrent replacement); stage 1 exit
criteria: TTL and forced-refresh tests, malformed refreshes never replace a valid snapshot,
readers always see a complete descriptor.

A TTL bound (``cache_ttl``) and a forced refresh (``forced_refresh``) are what MR-1 and MR-5
demand: a build without them FAILs those tests (``mc_demands``). Lookups are judged on what the
target reveals of a cached descriptor (``planting.shows``: every buffer, or a real build's first
buffer address), and waits scale with the TTL the engine actually runs with (a real build
rounds up to whole seconds).
"""

from __future__ import annotations

import threading

import pytest

from pytest_mooncake.planting import (
    described,
    malformed_values,
    plant,
    published,
    shows,
    with_probe_buffer,
)
from pytest_mooncake.waits import Timeout, holds_for, wait_until, within

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000

pytestmark = pytest.mark.mc_requires("engine", "cache_control")


def ttl_s(engine, asked_ms: float) -> float:
    """The TTL ``engine`` runs with, in seconds (what was asked where it reports none)."""
    ttl = engine.cache_ttl_ms
    return (asked_ms if ttl is None else ttl) / 1000


def bound_of(engine) -> str:
    ttl = engine.cache_ttl_ms
    return "no cache bound" if ttl is None else f"cache TTL {ttl:g} ms as the engine runs"


def keeps_serving(engine, peer: str, doc, seconds: float, what: str) -> None:
    """``engine`` serves ``doc`` for ``peer`` at every lookup for ``seconds``; the failure says
    what it served instead."""
    last = []

    def serves() -> bool:
        last[:] = [engine.lookup(peer)]
        return shows(last[0], doc)

    try:
        holds_for(serves, seconds, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: it served {described(last[0])}") from None


def picks_up(engine, peer: str, doc, within_s: float) -> bool:
    """``engine`` serves ``doc`` for ``peer`` within ``within_s`` seconds."""
    try:
        wait_until(lambda: shows(engine.lookup(peer), doc), within_s,
                   f"{engine.segment} to serve the new descriptor of {peer}")
    except Timeout:
        return False
    return True


@pytest.mark.mc_req("MR-1")
def test_remote_descriptor_is_not_cached_for_ever_by_default(mc_engine, mc_metadata):
    """MR-1 bounds how long a remote descriptor is served: an engine started with the target's
    defaults must pick up a peer's new descriptor within WAIT, not serve the first one for
    ever."""
    mc_engine("seg-a")
    b = mc_engine("seg-b")
    assert b.lookup("seg-a").ok, f"B could not resolve A at all: {b.lookup('seg-a').error}"
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True)
    plant(mc_metadata, "seg-a", v2)
    assert picks_up(b, "seg-a", v2, WAIT), (
        f"with the target's default settings ({bound_of(b)}), B still served A's old descriptor ({described(b.lookup('seg-a'))}) {WAIT:g}s "
        f"after A's descriptor changed in the store; MR-1 requires a remote descriptor be "
        f"served from cache for at most metadata_cache_ttl_ms, and a cache that is never "
        f"refreshed unless configured has no such bound")


@pytest.mark.mc_req("MR-1", "MR-3")
@pytest.mark.mc_demands("cache_ttl")
@pytest.mark.parametrize("mc_metadata", ["etcd", "http"], indirect=True)
def test_remote_descriptor_is_refetched_after_the_ttl(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    first = b.lookup("seg-a")
    assert first.ok, f"B could not resolve A at all: {first.error}"
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True)
    plant(mc_metadata, "seg-a", v2)
    bound = ttl_s(b, SHORT_TTL_MS) + WAIT
    assert picks_up(b, "seg-a", v2, bound), (
        f"A's descriptor changed in the metadata store, but {bound:g}s later (TTL "
        f"{ttl_s(b, SHORT_TTL_MS):g}s as B runs) B still serves {described(b.lookup('seg-a'))}; "
        f"MR-1 requires a remote descriptor be cached for at most metadata_cache_ttl_ms, MR-3 "
        f"that a lookup past the TTL fetches and installs the new snapshot whole")
    assert a.alive()


@pytest.mark.mc_req("MR-1")
def test_local_segment_is_never_refetched(mc_engine, mc_metadata):
    a = mc_engine("seg-a", prefer_ttl_ms=SHORT_TTL_MS)
    own = published(mc_metadata, "seg-a")
    assert shows(a.lookup("seg-a"), own), (
        f"A does not resolve its own segment as published: {described(a.lookup('seg-a'))}")
    mc_metadata.delete(mc_metadata.segment_key("seg-a"))
    plant(mc_metadata, "seg-a", b"garbage")
    keeps_serving(a, "seg-a", own, 3 * ttl_s(a, SHORT_TTL_MS),
              "A serving its own segment from its local snapshot after the store value was "
              "replaced by garbage (MR-1: local segments are never refetched)")


@pytest.mark.mc_req("MR-2")
def test_no_metadata_io_within_the_ttl(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=LONG_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), (
        f"B could not resolve A through the proxy: {described(b.lookup('seg-a'))}")
    plant(mc_metadata, "seg-a",
          with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True))
    proxy.disable()
    keeps_serving(b, "seg-a", first, 1.0,
              "B answering lookups of A from its cache with the metadata network cut and a new "
              "value in the store (MR-2: within the TTL a lookup does no metadata-store I/O)")


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_demands("cache_ttl")
def test_failed_refresh_keeps_the_previous_snapshot(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=SHORT_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), described(b.lookup("seg-a"))
    proxy.disable()
    keeps_serving(b, "seg-a", first, 4 * ttl_s(b, SHORT_TTL_MS),
              "B returning A's last good descriptor while every refresh fails on a cut metadata "
              "network (MR-4: an ordinary refresh that fails keeps and returns the previous "
              "snapshot)")
    assert b.alive(), "B died while its metadata network was cut"


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_demands("cache_ttl")
@pytest.mark.parametrize("mc_metadata", ["etcd", "http"], indirect=True)
def test_malformed_values_never_replace_a_valid_snapshot(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), described(b.lookup("seg-a"))
    for bad in malformed_values(good):
        plant(mc_metadata, "seg-a", bad.raw)
        keeps_serving(b, "seg-a", good, 2 * ttl_s(b, SHORT_TTL_MS),
                  f"B keeping A's valid descriptor after {bad.why} ({bad.name}) was planted "
                  f"(MR-4: a malformed refresh never overwrites a valid snapshot)")
        assert b.alive(), f"B crashed on a malformed descriptor: {bad.why}"


@pytest.mark.mc_req("MR-5")
@pytest.mark.mc_demands("forced_refresh")
def test_forced_refresh_bypasses_the_ttl(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True)
    plant(mc_metadata, "seg-a", v2)
    forced = b.lookup("seg-a", force=True)
    assert forced.ok, f"a forced refresh of a reachable, valid descriptor failed: {forced.error}"
    assert shows(forced, v2), (
        f"a forced refresh returned {described(forced)}, the cached descriptor, although the "
        f"store holds a new one; MR-5 requires a forced refresh to bypass the TTL")


@pytest.mark.mc_req("MR-5")
@pytest.mark.mc_demands("forced_refresh")
def test_failed_forced_refresh_is_a_failure(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok
    proxy.disable()
    forced = b.lookup("seg-a", force=True)
    assert not forced.ok, (
        f"with the metadata network cut, a forced refresh of A returned success with "
        f"{described(forced)}; MR-5 requires a failed forced refresh to return a "
        f"failure, never the stale snapshot as success")
    proxy.enable()
    wait_until(lambda: b.lookup("seg-a", force=True).ok, WAIT,
               "forced refreshes to succeed again after the metadata network healed")


@pytest.mark.mc_req("MR-6")
@pytest.mark.mc_demands("cache_ttl")
def test_concurrent_readers_never_see_a_torn_descriptor(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=0)
    base = published(mc_metadata, "seg-a")
    versions = []
    for n in range(1, 5):
        doc = dict(base)
        for i in range(n):
            doc = with_probe_buffer(doc, f"v{n}-{i}", first=True)
        versions.append(doc)
    legal = [base, *versions]
    stop = threading.Event()
    torn: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 400:
            plant(mc_metadata, "seg-a", versions[i % len(versions)])
            i += 1

    def reader() -> None:
        for _ in range(60):
            result = b.lookup("seg-a")
            if result.ok and not any(shows(result, v) for v in legal):
                torn.append(described(result))

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join(timeout=60)
    stop.set()
    threads[0].join(timeout=60)
    assert not any(t.is_alive() for t in threads), "lookups hung under concurrent replacement"
    assert not torn, (
        f"readers observed {len(torn)} descriptors that match no published version, e.g. "
        f"{torn[0]}; MR-6 requires readers only ever observe complete snapshots")


@pytest.mark.mc_req("MR-6")
@pytest.mark.mc_requires("forced_refresh")
def test_a_slow_fetch_does_not_block_cached_lookups(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    mc_engine("seg-c")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok and b.lookup("seg-c").ok
    proxy.add_toxic(type="timeout", attributes={"timeout": 0}, name="blackhole")
    slow = threading.Thread(target=b.lookup, args=("seg-a",), kwargs={"force": True})
    slow.start()
    try:
        holds_for(lambda: within(5.0, b.lookup, "seg-c", what="a cached lookup").ok, 1.0,
                  "lookups of a cached peer completing while a forced refresh of another peer "
                  "hangs on the metadata store (MR-6: no metadata I/O under the cache lock)")
    finally:
        proxy.destroy_toxic("blackhole")
        slow.join(timeout=30)
