"""MR-1..MR-6: the bounded metadata cache (stage 1 of the metadata RFC).

Validation scenarios 1 (refresh after TTL, not before), 2 (a transport failure bypasses TTL, here
as a forced refresh) and 7 (no partial snapshot under concurrent replacement); stage 1 exit
criteria: TTL and forced-refresh tests, malformed refreshes never replace a valid snapshot,
readers always see a complete descriptor.
"""

from __future__ import annotations

import threading

import pytest

from pytest_mooncake.planting import (
    buffer_names,
    malformed_values,
    plant,
    published,
    with_probe_buffer,
)
from pytest_mooncake.waits import Timeout, holds_for, wait_until, within

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000

pytestmark = pytest.mark.mc_requires("engine", "cache_control")


def _names(result):
    return buffer_names(result.descriptor) if result.ok else f"failure: {result.error}"


@pytest.mark.mc_req("MR-1", "MR-3")
@pytest.mark.parametrize("mc_metadata", ["etcd", "http"], indirect=True)
def test_remote_descriptor_is_refetched_after_the_ttl(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    first = b.lookup("seg-a")
    assert first.ok, f"B could not resolve A at all: {first.error}"
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2")
    plant(mc_metadata, "seg-a", v2)
    try:
        seen = wait_until(lambda: "probe-v2" in _names(b.lookup("seg-a")) and b.lookup("seg-a"),
                          WAIT, "B to pick up A's new descriptor")
    except Timeout:
        pytest.fail(
            f"A's descriptor changed in the metadata store, but {WAIT:g}s later (TTL "
            f"{SHORT_TTL_MS} ms) B still serves the old one {_names(b.lookup('seg-a'))}; "
            f"MR-1 requires a remote descriptor be cached for at most metadata_cache_ttl_ms, "
            f"MR-3 that a lookup past the TTL fetches the new snapshot", pytrace=False)
    assert buffer_names(seen.descriptor) == buffer_names(v2), (
        f"B installed {buffer_names(seen.descriptor)}, not the published "
        f"{buffer_names(v2)}: MR-3 requires the fetched snapshot be installed whole")
    assert a.alive()


@pytest.mark.mc_req("MR-1")
def test_local_segment_is_never_refetched(mc_engine, mc_metadata):
    a = mc_engine("seg-a", ttl_ms=SHORT_TTL_MS)
    own = a.lookup("seg-a")
    assert own.ok, f"A cannot resolve its own segment: {own.error}"
    mc_metadata.delete(mc_metadata.segment_key("seg-a"))
    plant(mc_metadata, "seg-a", b"garbage")
    holds_for(lambda: a.lookup("seg-a").ok and buffer_names(a.lookup("seg-a").descriptor)
              == buffer_names(own.descriptor),
              3 * SHORT_TTL_MS / 1000,
              "A serving its own segment from its local snapshot after the store value was "
              "replaced by garbage (MR-1: local segments are never refetched)")


@pytest.mark.mc_req("MR-2")
def test_no_metadata_io_within_the_ttl(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=LONG_TTL_MS)
    first = b.lookup("seg-a")
    assert first.ok, f"B could not resolve A through the proxy: {first.error}"
    plant(mc_metadata, "seg-a", with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2"))
    proxy.disable()
    holds_for(lambda: _names(b.lookup("seg-a")) == buffer_names(first.descriptor), 1.0,
              "B answering lookups of A from its cache with the metadata network cut and a new "
              "value in the store (MR-2: within the TTL a lookup does no metadata-store I/O)")


@pytest.mark.mc_req("MR-4")
def test_failed_refresh_keeps_the_previous_snapshot(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=SHORT_TTL_MS)
    first = b.lookup("seg-a")
    assert first.ok, first.error
    proxy.disable()
    holds_for(lambda: _names(b.lookup("seg-a")) == buffer_names(first.descriptor),
              4 * SHORT_TTL_MS / 1000,
              "B returning A's last good descriptor while every refresh fails on a cut metadata "
              "network (MR-4: an ordinary refresh that fails keeps and returns the previous "
              "snapshot)")
    assert b.alive(), "B died while its metadata network was cut"


@pytest.mark.mc_req("MR-4")
@pytest.mark.parametrize("mc_metadata", ["etcd", "http"], indirect=True)
def test_malformed_values_never_replace_a_valid_snapshot(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    first = b.lookup("seg-a")
    assert first.ok, first.error
    good = published(mc_metadata, "seg-a")
    for bad in malformed_values(good):
        plant(mc_metadata, "seg-a", bad.raw)
        holds_for(lambda: _names(b.lookup("seg-a")) == buffer_names(first.descriptor),
                  2 * SHORT_TTL_MS / 1000,
                  f"B keeping A's valid descriptor after {bad.why} ({bad.name}) was planted "
                  f"(MR-4: a malformed refresh never overwrites a valid snapshot)")
        assert b.alive(), f"B crashed on a malformed descriptor: {bad.why}"


@pytest.mark.mc_req("MR-5")
def test_forced_refresh_bypasses_the_ttl(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2")
    plant(mc_metadata, "seg-a", v2)
    forced = b.lookup("seg-a", force=True)
    assert forced.ok, f"a forced refresh of a reachable, valid descriptor failed: {forced.error}"
    assert "probe-v2" in buffer_names(forced.descriptor), (
        f"a forced refresh returned {buffer_names(forced.descriptor)}, the cached descriptor, "
        f"although the store holds {buffer_names(v2)}; MR-5 requires a forced refresh to bypass "
        f"the TTL")


@pytest.mark.mc_req("MR-5")
def test_failed_forced_refresh_is_a_failure(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok
    proxy.disable()
    forced = b.lookup("seg-a", force=True)
    assert not forced.ok, (
        f"with the metadata network cut, a forced refresh of A returned success with "
        f"{buffer_names(forced.descriptor)}; MR-5 requires a failed forced refresh to return a "
        f"failure, never the stale snapshot as success")
    proxy.enable()
    wait_until(lambda: b.lookup("seg-a", force=True).ok, WAIT,
               "forced refreshes to succeed again after the metadata network healed")


@pytest.mark.mc_req("MR-6")
def test_concurrent_readers_never_see_a_torn_descriptor(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=0)
    base = published(mc_metadata, "seg-a")
    versions = []
    for n in range(1, 5):
        doc = dict(base)
        for i in range(n):
            doc = with_probe_buffer(doc, f"v{n}-{i}")
        versions.append(doc)
    legal = {tuple(buffer_names(v)) for v in versions} | {tuple(buffer_names(base))}
    stop = threading.Event()
    torn: list[list[str]] = []

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 400:
            plant(mc_metadata, "seg-a", versions[i % len(versions)])
            i += 1

    def reader() -> None:
        for _ in range(60):
            result = b.lookup("seg-a")
            if result.ok and tuple(buffer_names(result.descriptor)) not in legal:
                torn.append(buffer_names(result.descriptor))

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
