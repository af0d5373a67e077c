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

import json
import threading

import pytest

from pytest_mooncake.planting import (
    at_the_first_address,
    described,
    ending_at_the_last_address,
    in_rdma_form,
    malformed_values,
    of_one_byte,
    plant,
    plant_foreign,
    published,
    shows,
    with_probe_buffer,
)
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.waits import Timeout, holds_for, wait_until, within

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000
BEHIND_A_FETCH_S = 30.0
"""How long an ordinary lookup may wait for a fetch still in flight before it must return the
previous snapshot (MR-4): three times the reference's 10 s bound on waiting for another
lookup's fetch, a fifth of the 150 s the test's trickle lasts."""

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


def picks_up(engine, peer: str, doc, within_s: float, poll: float | None = None) -> bool:
    """``engine`` serves ``doc`` for ``peer`` within ``within_s`` seconds (looking it up every
    ``poll`` seconds when given)."""
    pace = {} if poll is None else {"interval": poll, "max_interval": poll}
    try:
        wait_until(lambda: shows(engine.lookup(peer), doc), within_s,
                   f"{engine.segment} to serve the new descriptor of {peer}", **pace)
    except Timeout:
        return False
    return True


def _counters(engine) -> dict[str, int] | None:
    """The engine's counters, or None where the target cannot read them."""
    try:
        return dict(engine.stats())
    except TargetLacks:
        return None


POLL = 0.02
"""A lookup every 20 ms: far more often than the short TTL, so an entry that only expires when
it is left alone (a TTL counted from the last use) would never expire."""


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
@pytest.mark.parametrize("mc_metadata", ["etcd", "redis", "http"], indirect=True)
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


@pytest.mark.mc_req("MR-1")
@pytest.mark.mc_requires("forced_refresh")
def test_a_forced_lookup_of_the_local_segment_is_not_refetched(mc_engine, mc_metadata):
    a = mc_engine("seg-a", prefer_ttl_ms=SHORT_TTL_MS)
    own = published(mc_metadata, "seg-a")
    mc_metadata.delete(mc_metadata.segment_key("seg-a"))
    plant(mc_metadata, "seg-a", b"garbage")
    forced = a.lookup("seg-a", force=True)
    assert shows(forced, own), (
        f"a forced lookup of A's own segment returned {described(forced)} with garbage in the "
        f"store: it refetched; MR-1 requires local segments always be served from the local "
        f"snapshot, never refetched")


@pytest.mark.mc_req("MR-1")
@pytest.mark.mc_demands("cache_ttl")
def test_frequent_lookups_do_not_keep_a_descriptor_past_its_ttl(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    assert b.lookup("seg-a").ok
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True)
    plant(mc_metadata, "seg-a", v2)
    bound = ttl_s(b, SHORT_TTL_MS) + WAIT
    if not picks_up(b, "seg-a", v2, bound, poll=POLL):
        pytest.fail(
            f"B looked A up every {POLL * 1000:.0f} ms with a TTL of "
            f"{ttl_s(b, SHORT_TTL_MS):g}s and served {described(b.lookup('seg-a'))} for "
            f"{bound:g}s after A's descriptor changed in the store: its cache entries do not "
            f"expire while they are in use. MR-1 bounds a remote descriptor to "
            f"metadata_cache_ttl_ms after its last successful refresh, not after its last use",
            pytrace=False)


@pytest.mark.mc_req("MR-1")
@pytest.mark.mc_demands("cache_ttl")
def test_a_zero_ttl_caches_nothing(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=0)
    assert b.lookup("seg-a").ok
    doc = published(mc_metadata, "seg-a")
    for n in range(1, 4):
        doc = with_probe_buffer(doc, f"zero-ttl-v{n}", first=True)
        plant(mc_metadata, "seg-a", doc)
        seen = b.lookup("seg-a")
        assert shows(seen, doc), (
            f"with metadata_cache_ttl_ms = 0 ({bound_of(b)}), B's next lookup after A's "
            f"descriptor changed returned {described(seen)}, not the stored version {n}: MR-1 "
            f"allows a remote descriptor to be served from cache for at most the TTL, here 0 ms")


@pytest.mark.mc_req("MR-1")
@pytest.mark.mc_requires("engine_counters")
def test_a_failed_refresh_does_not_restart_the_ttl(mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    ttl_ms = 1500
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=ttl_ms)
    first = b.lookup("seg-a")
    assert first.ok, first.error
    proxy.disable()
    v2 = with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True)
    plant(mc_metadata, "seg-a", v2)
    failed = b.stats().get("refresh_failed", 0)
    try:
        wait_until(lambda: b.lookup("seg-a").ok and b.stats().get("refresh_failed", 0) > failed,
                   WAIT, "B's refresh of A to fail on the cut metadata network",
                   interval=POLL, max_interval=POLL)
    except Timeout:
        pytest.fail(
            f"with the metadata network cut for {WAIT:g}s (TTL {ttl_ms} ms), B never counted a "
            f"failed refresh of A (counters {b.stats()}; its lookup served "
            f"{described(b.lookup('seg-a'))}): MR-1's TTL restarts only on a successful "
            f"refresh, so a build must try one, fail it and serve the previous snapshot",
            pytrace=False)
    finally:
        proxy.enable()
    seen = b.lookup("seg-a")
    assert shows(seen, v2), (
        f"B's refresh of A failed while the metadata network was cut (the previous snapshot was "
        f"served, as MR-4 requires); right after the network healed B's lookup still returned "
        f"{described(seen)}, not the stored new value: the failed refresh was taken as a "
        f"refresh and restarted the {ttl_ms} ms TTL. MR-1 counts the TTL from the last "
        f"*successful* refresh, which is long past")


def caching_through(proxied, mc_engine, mc_metadata):
    """A, and B reaching the metadata store only through ``proxied``'s proxy, with A's current
    descriptor in its cache (TTL LONG_TTL_MS asked): (B, that descriptor)."""
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=proxied[1], prefer_ttl_ms=LONG_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), (
        f"B could not resolve A through the proxy: {described(b.lookup('seg-a'))}")
    return b, first


@pytest.mark.mc_req("MR-2")
def test_no_metadata_io_within_the_ttl(mc_engine, mc_metadata, proxied_metadata):
    proxy = proxied_metadata[0]
    b, first = caching_through(proxied_metadata, mc_engine, mc_metadata)
    plant(mc_metadata, "seg-a",
          with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True))
    proxy.disable()
    keeps_serving(b, "seg-a", first, 1.0,
              "B answering lookups of A from its cache with the metadata network cut and a new "
              "value in the store (MR-2: within the TTL a lookup does no metadata-store I/O)")


LOOKUPS = 20


@pytest.mark.mc_req("MR-2")
@pytest.mark.parametrize("mc_metadata", ["redis", "http"], indirect=True)
def test_lookups_within_the_ttl_send_nothing_to_the_store(mc_engine, mc_metadata,
                                                          proxied_metadata, mc_faults):
    """MR-2 judged on the wire. Lookups alone cannot tell a cache that quietly re-reads the
    value on every hit (keeping its snapshot while the read agrees or fails) from one that does
    no I/O: both serve the cached descriptor. The proxy B alone reaches the store through can:
    its byte counters (Toxiproxy's ``toxiproxy_proxy_received_bytes_total``) say whether B sent
    anything. HTTP and Redis metadata only: each request is bytes on a connection and an idle
    HTTP or Redis client sends nothing (a gRPC channel to etcd may send keepalive pings of its
    own accord)."""
    b, first = caching_through(proxied_metadata, mc_engine, mc_metadata)
    plant(mc_metadata, "seg-a", with_probe_buffer(first, "probe-v2", first=True))
    name = proxied_metadata[0].name
    before = mc_faults.received_bytes(name)
    if isinstance(before, str):
        raise TargetLacks("metadata_faults", before)
    if not before["upstream"]:
        raise TargetLacks("metadata_faults", (
            f"proxy {name} counted no byte of B's first lookup of A, which fetched through it "
            f"(a real Toxiproxy counts a connection's bytes when it closes): its counters cannot "
            f"show B's metadata traffic"))
    served = [b.lookup("seg-a") for _ in range(LOOKUPS)]
    after = mc_faults.received_bytes(name)
    stale = [described(s) for s in served if not shows(s, first)]
    assert not stale, (
        f"within its TTL ({bound_of(b)}) B served {stale[0]} instead of its cached snapshot "
        f"(MR-2: within the TTL a lookup does no metadata-store I/O, so it cannot see the new "
        f"value)")
    sent = after["upstream"] - before["upstream"]
    assert sent == 0, (
        f"B's {LOOKUPS} lookups of a peer it had cached moments before, within its TTL "
        f"({bound_of(b)}), sent {sent:g} bytes toward the metadata store (and read "
        f"{after['downstream'] - before['downstream']:g} back) although each served the cached "
        f"snapshot; MR-2 requires that within the TTL a lookup does no metadata-store I/O")


@pytest.mark.mc_req("MR-2")
def test_a_changed_value_is_not_read_within_the_ttl(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), described(b.lookup("seg-a"))
    before = _counters(b)
    plant(mc_metadata, "seg-a",
          with_probe_buffer(published(mc_metadata, "seg-a"), "probe-v2", first=True))
    keeps_serving(b, "seg-a", first, 1.0,
                  f"B answering lookups of A from its cache ({bound_of(b)}) while the store "
                  f"holds a new value and the metadata network works (MR-2: within the TTL a "
                  f"lookup does no metadata-store I/O, so it cannot see the new value)")
    after = _counters(b)
    if before is not None and "metadata_fetches" in before:
        assert after["metadata_fetches"] == before["metadata_fetches"], (
            f"B's lookups of a cached peer within its TTL made "
            f"{after['metadata_fetches'] - before['metadata_fetches']} metadata fetch(es) "
            f"(MR-2: within the TTL a lookup does no metadata-store I/O)")


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
@pytest.mark.parametrize("mc_metadata", ["etcd", "redis", "http"], indirect=True)
def test_malformed_values_never_replace_a_valid_snapshot(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), described(b.lookup("seg-a"))
    held = 0
    for bad in malformed_values(good):
        try:
            plant(mc_metadata, "seg-a", bad.raw)
        except (OSError, RuntimeError):
            # the store itself refuses the value (0.3.14's HTTP server answers 413 to the
            # 1.4 MB one): no engine can ever read it from there, so there is nothing to judge
            continue
        held += 1
        keeps_serving(b, "seg-a", good, 2 * ttl_s(b, SHORT_TTL_MS),
                  f"B keeping A's valid descriptor after {bad.why} ({bad.name}) was planted "
                  f"(MR-4: a malformed refresh never overwrites a valid snapshot)")
        assert b.alive(), f"B crashed on a malformed descriptor: {bad.why}"
    assert held, f"{mc_metadata.uri} refused every malformed value the test planted"


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_demands("cache_ttl")
def test_a_failed_refresh_keeps_the_last_valid_snapshot_not_an_older_one(mc_engine, mc_metadata):
    """The "last" edge of "keeps the previous snapshot": after A's descriptor changed once and B
    installed the new version, a malformed value keeps that last version, not the first one B
    ever saw. The previous snapshot is the last one B installed: a B that never takes up the
    second version (MR-1's failure, judged there) must keep serving the first."""
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), described(b.lookup("seg-a"))
    second = with_probe_buffer(first, "second-version", first=True)
    plant(mc_metadata, "seg-a", second)
    last, which = ((second, "the second version") if picks_up(b, "seg-a", second, WAIT)
                   else (first, "the first version, as it never took up the second"))
    bad = malformed_values(first)[1]
    plant(mc_metadata, "seg-a", bad.raw)
    keeps_serving(b, "seg-a", last, 2 * ttl_s(b, SHORT_TTL_MS),
                  f"B keeping the last valid descriptor of A it installed ({which}) after "
                  f"{bad.why} was planted (MR-4: a failed refresh keeps the previous snapshot)")


def installs_the_edge(mc_engine, mc_metadata, at_edge, what: str) -> None:
    """B has A cached; A's descriptor becomes ``at_edge(good)``, valid at an edge of the
    buffer checks: B's lookups must come to serve it, as MR-3 installs every descriptor that
    validates."""
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), described(b.lookup("seg-a"))
    edge = at_edge(good)
    plant(mc_metadata, "seg-a", json.dumps(edge).encode())
    bound = WAIT + 2 * ttl_s(b, SHORT_TTL_MS)
    try:
        wait_until(lambda: shows(b.lookup("seg-a"), edge), bound, f"B installing {what}")
    except Timeout:
        buf = edge["buffers"][0]
        pytest.fail(f"A's descriptor now holds {what} ({buf['addr']:#x} + {buf['length']}), a "
                    f"valid range, but B still serves {described(b.lookup('seg-a'))} {bound:g}s "
                    f"later ({bound_of(b)}): MR-3 installs every descriptor that validates")


@pytest.mark.mc_req("MR-3")
@pytest.mark.mc_demands("cache_ttl")
def test_a_buffer_ending_at_the_last_address_is_installed(mc_engine, mc_metadata):
    """The edge of the address check: a buffer whose last byte is 2**64 - 1 is valid, so a
    refresh installs it (one byte further is among ``malformed_values``, never installed)."""
    installs_the_edge(mc_engine, mc_metadata, ending_at_the_last_address,
                      "a buffer ending at the last 64-bit address")


@pytest.mark.mc_req("MR-3")
@pytest.mark.mc_demands("cache_ttl")
def test_a_buffer_at_the_first_address_is_installed(mc_engine, mc_metadata):
    """The low edge of the address check: a buffer starting at address 1 is valid, so a
    refresh installs it (address 0, the null pointer, is ``null-address`` among
    ``malformed_values``, never installed; Mooncake's decoder rejects ``addr == 0`` only)."""
    installs_the_edge(mc_engine, mc_metadata, at_the_first_address,
                      "a buffer starting at address 1")


@pytest.mark.mc_req("MR-3")
@pytest.mark.mc_demands("cache_ttl")
def test_a_one_byte_buffer_is_installed(mc_engine, mc_metadata):
    """The edge of the length check: a buffer of one byte is valid, so a refresh installs it
    (length 0 is ``zero-length`` among ``malformed_values``, never installed; Mooncake's
    decoder rejects ``length == 0`` only)."""
    installs_the_edge(mc_engine, mc_metadata, of_one_byte, "a buffer of one byte")


@pytest.mark.mc_req("MR-3")
@pytest.mark.mc_demands("cache_ttl")
def test_a_buffer_with_one_key_per_device_is_installed(mc_engine, mc_metadata):
    """The edge of the key-count checks: an rdma descriptor as Mooncake's RDMA transport
    publishes it (one device, a buffer with one rkey and one lkey, ``tcp_data_port`` 0) is
    valid, so a refresh installs it (two rkeys for one lkey, or for one device, are among
    ``malformed_values``, never installed; Mooncake's decoder rejects those counts only)."""
    installs_the_edge(mc_engine, mc_metadata, in_rdma_form,
                      "an rdma buffer with one rkey and one lkey per device")


@pytest.mark.mc_req("MR-3", "MR-4")
@pytest.mark.mc_demands("cache_ttl")
def test_another_segments_descriptor_is_never_installed(mc_engine, mc_metadata):
    mc_engine("seg-a")
    mc_engine("seg-c")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), described(b.lookup("seg-a"))
    foreign = plant_foreign(mc_metadata, "seg-a", "seg-c")
    keeps_serving(b, "seg-a", good, 3 * ttl_s(b, SHORT_TTL_MS),
                  f"B keeping A's descriptor after seg-c's descriptor (name "
                  f"{foreign.get('name')!r}) was planted under seg-a's key (MR-3: a refresh "
                  f"validates before it installs; MR-4: an invalid descriptor never overwrites "
                  f"a valid snapshot)")


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_demands("cache_ttl")
def test_a_blackholed_refresh_returns_the_previous_snapshot_in_bounded_time(
        mc_engine, mc_metadata, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=0)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), described(b.lookup("seg-a"))
    proxy.add_toxic(type="timeout", attributes={"timeout": 0}, name="blackhole")
    try:
        seen = within(WAIT * 2, b.lookup, "seg-a",
                      what="a lookup of A while the metadata network swallows every byte")
    except Timeout:
        pytest.fail(f"with the metadata network black-holed (no answer, no reset), B's lookup of "
                    f"A did not return within {WAIT * 2:g}s; MR-4 requires a refresh that times "
                    f"out to keep and return the previous snapshot", pytrace=False)
    finally:
        proxy.destroy_toxic("blackhole")
    assert shows(seen, good), (
        f"after a refresh timed out, B's lookup returned {described(seen)}; MR-4 requires the "
        f"previous snapshot")


class LookupInFlight:
    """B's lookup of seg-a on a thread, its fetch trickling through the proxy at ``rate`` kB/s
    (a ``with`` block): entered once B counts the fetch begun, left with the toxic removed and
    the lookup ended. ``result`` is what it returned; ``ended`` whether it had returned."""

    def __init__(self, b, proxy, rate: int, what: str):
        self.b, self.proxy, self.rate, self.what = b, proxy, rate, what
        self.result = None
        self.ended = threading.Event()

    def _run(self) -> None:
        self.result = self.b.lookup("seg-a")
        self.ended.set()

    def __enter__(self) -> LookupInFlight:
        fetches = self.b.stats().get("metadata_fetches", 0)
        self.proxy.add_toxic(type="bandwidth", attributes={"rate": self.rate},
                             stream="downstream", name="slow")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        try:
            wait_until(lambda: self.b.stats().get("metadata_fetches", 0) > fetches, WAIT,
                       f"{self.what} to start its (slow) fetch")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.proxy.destroy_toxic("slow")
        self.thread.join(timeout=60)


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_requires("engine_counters")
@pytest.mark.parametrize("mc_metadata", ["http"], indirect=True)
def test_a_lookup_behind_a_fetch_that_outlasts_the_bound_returns_the_previous_snapshot(
        mc_engine, mc_metadata, proxied_metadata):
    """B has A cached with a TTL of 0 (every lookup refreshes). One lookup of A starts a fetch
    that trickles for minutes (300 kB at 2 kB/s); a second lookup asks meanwhile. However an
    engine shares, bounds or repeats that fetch, the second lookup is an ordinary refresh that
    got no answer in time: MR-4 wants the previous snapshot back within a bound, not a failure
    and not a wait for the whole trickle."""
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=0)
    good = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), good), "precondition: B could not look A up at all"
    plant(mc_metadata, "seg-a", dict(good, padding="x" * 300_000))
    fetches = b.stats().get("metadata_fetches", 0)
    proxy.add_toxic(type="bandwidth", attributes={"rate": 2}, stream="downstream",
                    name="trickle")
    first = threading.Thread(target=b.lookup, args=("seg-a",), daemon=True)
    first.start()
    try:
        try:
            wait_until(lambda: b.stats().get("metadata_fetches", 0) > fetches, WAIT,
                       "B's first lookup of A to start its (trickling) fetch")
        except Timeout:
            raise TargetLacks("cache_ttl", (
                f"B's lookup of A with a TTL of 0 started no metadata fetch within {WAIT:g}s "
                f"(metadata_fetches stayed at {fetches}): the engine serves its cached "
                f"snapshot without refreshing, so no refresh can be left in flight (MR-1 "
                f"judges the TTL)")) from None
        try:
            second = within(BEHIND_A_FETCH_S, b.lookup, "seg-a",
                            what="B's second lookup of A while the first one's fetch trickles")
        except Timeout:
            pytest.fail(
                f"B's second lookup of A, made while the first one's fetch of a 300 kB value "
                f"trickled in at 2 kB/s, did not return within {BEHIND_A_FETCH_S:g}s; MR-4 "
                f"requires an ordinary refresh that times out to return the previous "
                f"snapshot", pytrace=False)
        still_fetching = first.is_alive()
    finally:
        proxy.destroy_toxic("trickle")
        first.join(timeout=60)
    assert still_fetching, ("precondition: the first lookup's fetch ended before the second "
                            "lookup returned, so the second one never outlasted it")
    assert shows(second, good), (
        f"B's second lookup of A, behind a fetch that outlasted it, returned "
        f"{described(second)}; MR-4 requires the previous snapshot")


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
@pytest.mark.mc_requires("engine_counters")
@pytest.mark.parametrize("mc_metadata", ["http"], indirect=True)
def test_a_forced_refresh_asked_during_an_ordinary_fetch_gets_what_was_published_before_it(
        mc_engine, mc_metadata, proxied_metadata):
    """B's first, ordinary lookup of A is on the wire (a 200 kB value at 40 kB/s) when A's
    descriptor changes and B then forces a refresh of A. The fetch in flight began before the
    change; a forced refresh bypasses the TTL and whatever was fetched before it was asked, so
    it returns the descriptor published before it was asked, not the one that earlier fetch
    is still bringing (MR-5, the edge where a forced refresh straddles an ordinary fetch)."""
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=LONG_TTL_MS)
    base = published(mc_metadata, "seg-a")
    plant(mc_metadata, "seg-a", dict(base, padding="x" * 200_000))
    after = with_probe_buffer(base, "published-before-the-forced-refresh", first=True)
    with LookupInFlight(b, proxy, 40, "B's ordinary lookup of A") as ordinary:
        plant(mc_metadata, "seg-a", after)
        overlapped = not ordinary.ended.is_set()
        forced = within(60.0, b.lookup, "seg-a", force=True,
                        what="B's forced refresh of seg-a while the ordinary fetch trickles in")
    assert overlapped, ("precondition: the ordinary fetch of A's 200 kB value ended before the "
                        "forced refresh was asked, so the two did not overlap")
    assert forced.ok, f"the forced refresh of a reachable, valid descriptor failed: {forced.error}"
    assert shows(forced, after), (
        f"a forced refresh asked after A's descriptor changed returned {described(forced)}, "
        f"what an ordinary fetch begun before the change brought; MR-5 requires a forced "
        f"refresh to bypass what was fetched before it was asked")


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


@pytest.mark.mc_req("MR-5")
@pytest.mark.mc_demands("forced_refresh")
def test_a_forced_refresh_that_finds_no_valid_value_is_a_failure(mc_engine, mc_metadata):
    mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    assert b.lookup("seg-a").ok
    good = published(mc_metadata, "seg-a")
    key = mc_metadata.segment_key("seg-a")
    cases = [("the key deleted", lambda: mc_metadata.delete(key))]
    cases += [(bad.why, lambda raw=bad.raw: plant(mc_metadata, "seg-a", raw))
              for bad in malformed_values(good)[:3]]
    for what, damage in cases:
        damage()
        forced = b.lookup("seg-a", force=True)
        assert not forced.ok, (
            f"a forced refresh of A with {what} in the store returned success with "
            f"{described(forced)} (the cached snapshot); MR-5 requires a failed forced refresh "
            f"to return a failure, never the stale snapshot as success")
        plant(mc_metadata, "seg-a", good)
        assert b.lookup("seg-a", force=True).ok, "a forced refresh of the restored value failed"


def fails_until_published(mc_engine, mc_metadata, force: bool) -> None:
    """A lookup of a segment nobody published yet is a failure (never a success with an empty
    or made-up descriptor, nor a crash); once the segment is published it succeeds."""
    kind = "forced refresh" if force else "ordinary lookup"
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    early = b.lookup("seg-a", force=force)
    assert not early.ok, (
        f"an {kind} of A before any engine published A returned success with "
        f"{described(early)}; with no previous snapshot there is nothing to return but a failure")
    assert b.alive(), f"B died on an {kind} of a segment nobody published"
    mc_engine("seg-a")
    doc = published(mc_metadata, "seg-a")
    late = wait_until(lambda: (r := b.lookup("seg-a", force=force)).ok and r, WAIT,
                      f"an {kind} of A to succeed once A published")
    assert shows(late, doc), (
        f"once A published, an {kind} of A returned {described(late)}, not A's descriptor")


@pytest.mark.mc_req("MR-4")
def test_a_lookup_with_no_snapshot_yet_fails_until_the_segment_is_published(mc_engine,
                                                                            mc_metadata):
    """The "none" edge of MR-4: with no previous snapshot there is nothing to keep, so an
    ordinary lookup whose fetch finds nothing is a failure."""
    fails_until_published(mc_engine, mc_metadata, force=False)


@pytest.mark.mc_req("MR-5")
@pytest.mark.mc_demands("forced_refresh")
def test_a_forced_refresh_with_no_snapshot_yet_fails_until_the_segment_is_published(mc_engine,
                                                                                    mc_metadata):
    """The "none" edge of MR-5: a forced refresh of a segment nobody published is a failure."""
    fails_until_published(mc_engine, mc_metadata, force=True)


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


@pytest.mark.mc_req("MR-6")
@pytest.mark.mc_requires("engine_counters")
@pytest.mark.parametrize("mc_metadata", ["http"], indirect=True)
def test_a_reader_arriving_during_a_slow_fetch_of_the_same_peer_gets_the_whole_descriptor(
        mc_engine, mc_metadata, proxied_metadata):
    """Two readers of one peer, the second asking while the first one's fetch (200 kB at
    40 kB/s) is still on the wire. An engine may share that fetch or make its own; either way
    each reader observes the complete descriptor. A fetch in flight is no reason to fail the
    reader that came second: MR-6's concurrent readers observe complete snapshots, and only
    those."""
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=LONG_TTL_MS)
    doc = dict(published(mc_metadata, "seg-a"), padding="x" * 200_000)
    plant(mc_metadata, "seg-a", doc)
    with LookupInFlight(b, proxy, 40, "B's first lookup of A") as first:
        overlapped = not first.ended.is_set()
        second = within(60.0, b.lookup, "seg-a",
                        what="B's second lookup of seg-a while the first one's fetch trickles in")
    assert overlapped, ("precondition: the first lookup's fetch of A's 200 kB value ended "
                        "before the second lookup began, so the two did not overlap")
    assert second.ok, (
        f"B's second lookup of seg-a, made while the first one's fetch of it was on the wire, "
        f"failed: {second.error}; the first lookup got "
        f"{'the descriptor' if getattr(first.result, 'ok', False) else first.result}")
    assert shows(second, doc), f"the second reader observed {described(second)}"
    assert getattr(first.result, "ok", False) and shows(first.result, doc), (
        f"the first reader observed {first.result}")


@pytest.mark.mc_req("MR-6")
@pytest.mark.mc_requires("engine_counters")
@pytest.mark.parametrize("mc_metadata", ["http"], indirect=True)
def test_a_slow_fetch_does_not_hold_up_another_peers_fetch(mc_engine, mc_metadata,
                                                          proxied_metadata):
    """Each HTTP metadata request is its own connection, so a bandwidth limit on the proxy makes
    the fetch of a large value slow and leaves a small one fast: B's first lookup of seg-c (a
    peer it never saw, so any implementation fetches it) can finish while the fetch of A's large
    value is still on the wire, unless that fetch holds the lock other lookups need."""
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    mc_engine("seg-c")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=LONG_TTL_MS)
    plant(mc_metadata, "seg-a", dict(published(mc_metadata, "seg-a"), padding="x" * 600_000))
    fetches = b.stats().get("metadata_fetches", 0)
    proxy.add_toxic(type="bandwidth", attributes={"rate": 40}, stream="downstream",
                    name="slow")
    slow = threading.Thread(target=b.lookup, args=("seg-a",), daemon=True)
    slow.start()
    try:
        wait_until(lambda: b.stats().get("metadata_fetches", 0) > fetches, WAIT,
                   "B's first lookup of A to start its (slow) fetch")
        try:
            other = within(5.0, b.lookup, "seg-c",
                           what="B's first lookup of seg-c while A's fetch trickles in")
        except Timeout:
            pytest.fail(
                "B's first lookup of seg-c waited behind its slow metadata fetch of A (600 kB "
                "at 40 kB/s): the fetch holds the lock other lookups need; MR-6 requires no "
                "metadata I/O under the cache lock", pytrace=False)
        still_fetching = slow.is_alive()
    finally:
        proxy.destroy_toxic("slow")
        slow.join(timeout=30)
    assert other.ok, f"B's lookup of seg-c failed: {other.error}"
    assert still_fetching, (
        "precondition: the fetch of A's 600 kB value ended before seg-c's lookup did, so this "
        "run could not tell whether one waits for the other")
