"""SegmentCache: every row of the RFC lookup table, single flight, failed refreshes, threads."""

from __future__ import annotations

import json
import logging
import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_engine.cache import LookupFailed, SegmentCache
from reference_engine.descriptor import decode, encode, tcp_descriptor
from reference_engine.profiles import LEGACY, RFC

TTL_MS = 100
DEADLINE = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * 1e6)


class Meta:
    """Published values per segment; counts fetches; can fail or block on demand."""

    def __init__(self) -> None:
        self.values: dict[str, bytes | None] = {}
        self.calls = 0
        self.error: Exception | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def publish(self, name: str, instance_id: str | None = "id-1", port: int = 1000,
                addr: int = 4096) -> bytes:
        raw = encode(tcp_descriptor(name, [(addr, 4096)], "127.0.0.1", port, instance_id))
        self.values[name] = raw
        return raw

    def __call__(self, name: str) -> bytes | None:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(DEADLINE), "test gate never opened"
        if self.error is not None:
            raise self.error
        return self.values.get(name)


def make(profile=RFC, ttl=TTL_MS, **kw):
    meta, clock = Meta(), Clock()
    cache = SegmentCache(meta, profile.engine.cache_policy(ttl), profile.engine.replacement, clock=clock,
                         **kw)
    return cache, meta, clock


def wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


# ------------------------------------------------------------------------------ the table


def test_local_segment_is_served_without_io_even_when_forced():
    cache, meta, clock = make()
    local = tcp_descriptor("me", [(4096, 10)], "127.0.0.1", 1, "x")
    cache.set_local(local)
    clock.advance_ms(10 * TTL_MS)
    assert cache.lookup("me") is local and cache.lookup("me", force=True) is local
    assert meta.calls == 0


def test_within_ttl_is_served_from_cache_without_io():
    cache, meta, clock = make()
    meta.publish("a", port=1)
    first = cache.lookup("a")
    meta.publish("a", port=2)
    clock.advance_ms(TTL_MS - 1)
    assert cache.lookup("a") is first and meta.calls == 1


def test_past_ttl_fetches_and_installs_the_new_snapshot():
    cache, meta, clock = make()
    meta.publish("a", port=1)
    cache.lookup("a")
    meta.publish("a", port=2)
    clock.advance_ms(TTL_MS)
    assert cache.lookup("a").tcp_data_port == 2 and meta.calls == 2
    assert cache.lookup("a").tcp_data_port == 2 and meta.calls == 2
    stats = cache.counters.snapshot()
    assert stats["refresh_ok"] == 2 and stats["snapshots_replaced"] == 1
    assert cache.entry("a").refreshed_at_ns == clock.now


@pytest.mark.parametrize("failure", ["io-error", "absent", "not-json", "invalid"])
def test_ordinary_refresh_failure_keeps_and_returns_the_old_snapshot(failure):
    cache, meta, clock = make()
    meta.publish("a", port=1)
    old = cache.lookup("a")
    old_entry = cache.entry("a")
    if failure == "io-error":
        meta.error = OSError("etcd unreachable")
    elif failure == "absent":
        meta.values["a"] = None
    elif failure == "not-json":
        meta.values["a"] = b'{"name":"a","protocol":"tc'
    else:
        meta.values["a"] = meta.values["a"].replace(b'"addr":4096', b'"addr":0')
    clock.advance_ms(TTL_MS + 1)
    assert cache.lookup("a") is old
    assert cache.entry("a") is old_entry
    assert cache.counters.get("refresh_failed") == 1 and meta.calls == 2
    clock.advance_ms(1)
    assert cache.lookup("a") is old and meta.calls == 3, "a failed refresh is no refresh"


def test_forced_refresh_bypasses_the_ttl():
    cache, meta, _ = make()
    meta.publish("a", port=1)
    cache.lookup("a")
    meta.publish("a", port=2)
    assert cache.lookup("a", force=True).tcp_data_port == 2
    assert cache.counters.get("refresh_forced") == 1 and meta.calls == 2


def test_forced_refresh_failure_is_a_failure_not_stale_success():
    cache, meta, _ = make()
    meta.publish("a")
    old = cache.lookup("a")
    meta.error = TimeoutError("slow etcd")
    with pytest.raises(LookupFailed, match="forced refresh of segment 'a' failed.*slow etcd"):
        cache.lookup("a", force=True)
    meta.error = None
    assert cache.lookup("a") is old, "the failed forced refresh did not touch the cache"


def test_first_lookup_failure_is_a_failure():
    cache, meta, _ = make()
    with pytest.raises(LookupFailed, match="no descriptor published"):
        cache.lookup("nobody")


def test_ttl_zero_refreshes_every_lookup_and_is_settable():
    cache, meta, _ = make(ttl=60_000)
    meta.publish("a")
    cache.lookup("a")
    cache.lookup("a")
    assert meta.calls == 1
    cache.set_ttl_ms(0)
    cache.lookup("a")
    cache.lookup("a")
    assert meta.calls == 3


def test_legacy_never_refetches_a_mapped_segment():
    """0.3.13 (checked on the wheel): a mapped segment is never refetched, forced or not."""
    cache, meta, clock = make(LEGACY)
    meta.publish("a", port=1)
    old = cache.lookup("a")
    meta.publish("a", port=2)
    clock.advance_ms(1e9)
    cache.set_ttl_ms(0)
    assert cache.lookup("a") is old and cache.lookup("a", force=True) is old
    assert meta.calls == 1 and cache.counters.get("refresh_forced") == 0


# ------------------------------------------------------------------------------ identity


def test_instance_change_counts_a_replacement_and_notifies():
    seen = []
    cache, meta, clock = make(on_replacement=lambda n, old, new: seen.append(
        (n, old.instance_id, new.instance_id)))
    meta.publish("a", instance_id="one")
    cache.lookup("a")
    meta.publish("a", instance_id="one", port=5)
    cache.lookup("a", force=True)
    assert cache.counters.get("replacements") == 0, "same id, other fields: no replacement"
    meta.publish("a", instance_id="two")
    cache.lookup("a", force=True)
    assert seen == [("a", "one", "two")] and cache.counters.get("replacements") == 1


def test_a_failed_cleanup_of_a_replaced_peer_is_logged_and_the_new_snapshot_stands(caplog):
    """MR-15's "retire observable", on its failure path, which no target can provoke from outside
    (the engine's own cleanup raising): the failure is logged with its traceback, and B serves
    the new instance anyway."""
    def cleanup_fails(name, old, new):
        raise RuntimeError("planted: closing the old endpoints failed")
    cache, meta, clock = make(on_replacement=cleanup_fails)
    meta.publish("a", instance_id="one")
    cache.lookup("a")
    meta.publish("a", instance_id="two")
    with caplog.at_level(logging.ERROR, logger="reference_engine.cache"):
        assert cache.lookup("a", force=True).instance_id == "two"
    failed = [r for r in caplog.records if "retiring resources of the replaced a failed" in
              r.getMessage()]
    assert failed and failed[0].exc_info and "planted" in str(failed[0].exc_info[1]), \
        [r.getMessage() for r in caplog.records]


def test_identical_resources_with_a_new_id_are_still_a_replacement():
    cache, meta, _ = make()
    meta.publish("a", instance_id="one")
    cache.lookup("a")
    meta.publish("a", instance_id="two")
    cache.lookup("a", force=True)
    assert cache.counters.get("replacements") == 1


def test_a_peer_without_id_is_a_legacy_peer():
    cache, meta, _ = make()
    meta.publish("a", instance_id=None)
    cache.lookup("a")
    cache.lookup("a", force=True)
    assert cache.counters.get("legacy_peers") == 1 and cache.counters.get("replacements") == 0


def test_legacy_profile_ignores_identity():
    cache, meta, _ = make(LEGACY)
    meta.publish("a", instance_id="one")
    cache.lookup("a")
    assert cache.counters.get("legacy_peers") == 0


# ------------------------------------------------------------------------------ single flight


def _run(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive(), "a lookup thread hung"


def test_concurrent_readers_past_ttl_cause_one_fetch():
    n = 8
    cache, meta, clock = make()
    meta.publish("a", port=1)
    cache.lookup("a")
    meta.publish("a", port=2)
    clock.advance_ms(TTL_MS + 1)
    meta.gate = threading.Event()
    meta.calls = 0
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.lookup("a")))
               for _ in range(n)]
    for t in threads:
        t.start()
    wait_for(lambda: cache.counters.get("refresh_coalesced") == n - 1, "coalesced lookups")
    meta.gate.set()
    for t in threads:
        t.join(DEADLINE)
    assert meta.calls == 1
    assert len(results) == n and all(r.tcp_data_port == 2 for r in results)


def test_a_refresh_that_finds_a_fresh_entry_returns_it_without_a_fetch():
    """``lookup`` reads freshness without the lock; by the time ``_refresh`` holds it, another
    flight may have installed a fresh entry (a window of microseconds no suite can time). The
    refresh then returns that snapshot and fetches nothing."""
    cache, meta, clock = make()
    meta.publish("a", port=1)
    first = cache.lookup("a")
    meta.calls = 0
    got = cache._refresh("a", force=False)
    assert got is first and meta.calls == 0


def test_forced_lookups_do_not_accept_a_fetch_begun_before_them():
    cache, meta, clock = make()
    meta.publish("a", port=1)
    cache.lookup("a")
    clock.advance_ms(TTL_MS + 1)
    meta.gate = threading.Event()
    meta.calls = 0
    ordinary = threading.Thread(target=cache.lookup, args=("a",))
    ordinary.start()
    assert meta.entered.wait(DEADLINE)
    meta.publish("a", port=2)  # published after the ordinary fetch began (it reads at the end)
    results = []
    forced = [threading.Thread(target=lambda: results.append(cache.lookup("a", force=True)))
              for _ in range(3)]
    for t in forced:
        t.start()
    wait_for(lambda: cache.counters.get("refresh_coalesced") == 3, "forced waiters")
    meta.gate.set()
    ordinary.join(DEADLINE)
    for t in forced:
        t.join(DEADLINE)
        assert not t.is_alive()
    assert meta.calls == 2, "the three forced lookups share one fetch of their own"
    assert cache.counters.get("refresh_forced") == 1 and len(results) == 3
    assert all(r is not None and r.tcp_data_port == 2 for r in results), results


# ------------------------------------------------------------------------------ bad values

VALID = json.loads(encode(tcp_descriptor("a", [(4096, 4096)], "127.0.0.1", 1, "one")))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8,
)


def _mutated(draw_key, value):
    doc = json.loads(json.dumps(VALID))
    if draw_key.startswith("buffers."):
        doc["buffers"][0][draw_key.split(".", 1)[1]] = value
    else:
        doc[draw_key] = value
    return json.dumps(doc).encode()


refresh_values = st.one_of(
    st.binary(max_size=200),
    st.builds(_mutated, st.sampled_from(sorted(VALID) + ["buffers.addr", "buffers.length",
                                                         "buffers.name"]), json_values),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=refresh_values, force=st.booleans())
def test_a_malformed_refresh_never_replaces_a_valid_snapshot(raw, force):
    cache, meta, clock = make()
    meta.publish("a", instance_id="one")
    old = cache.lookup("a")
    meta.values["a"] = raw
    clock.advance_ms(TTL_MS + 1)
    try:
        expected = decode(raw, "a")
    except ValueError:
        expected = None
    if expected is not None and expected.name != "a":
        expected = None  # another segment's descriptor is invalid under a's key
    if expected is not None:
        assert cache.lookup("a", force=force) == expected
        return
    if force:
        with pytest.raises(LookupFailed):
            cache.lookup("a", force=True)
    else:
        assert cache.lookup("a") is old
    assert cache.entry("a").snapshot is old


# ------------------------------------------------------------------------------ threads


def _version(k: int) -> bytes:
    return encode(tcp_descriptor("a", [(4096 * (k + 1), 4096 + k)], "127.0.0.1", 1 + k % 60000,
                                 f"{k:032x}"))


def _consistent(desc) -> bool:
    k = int(desc.instance_id, 16)
    return (desc.tcp_data_port == 1 + k % 60000 and desc.buffers[0].addr == 4096 * (k + 1)
            and desc.buffers[0].length == 4096 + k)


def test_readers_never_see_a_torn_snapshot_while_it_is_replaced(mc_seed):
    rng = random.Random(mc_seed)
    values = {"a": _version(0)}
    cache = SegmentCache(lambda name: values[name], RFC.engine.cache_policy(0), RFC.engine.replacement)
    stop = threading.Event()
    torn: list[object] = []
    reads = [0]

    def writer():
        k = 0
        while not stop.is_set():
            k += 1
            values["a"] = _version(k)

    def reader(seed):
        local = random.Random(seed)
        while not stop.is_set():
            try:
                desc = cache.lookup("a", force=local.random() < 0.2)
            except LookupFailed as exc:
                torn.append(exc)
                return
            reads[0] += 1
            if not _consistent(desc):
                torn.append(desc)

    def ttl_changer():
        while not stop.is_set():
            cache.set_ttl_ms(rng.choice([0, 0, 1, 5]))

    threads = [threading.Thread(target=writer), threading.Thread(target=ttl_changer)]
    threads += [threading.Thread(target=reader, args=(rng.random(),)) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: reads[0] >= 2000 or torn, "2000 reads")
    stop.set()
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive(), "deadlock: a thread did not finish"
    assert not torn
    stats = cache.counters.snapshot()
    assert stats["replacements"] > 0 and stats["refresh_failed"] == 0


# ------------------------------------------------------------------------------ log lines (MR-15)


def _cache_log(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "reference_engine.cache"]


def test_refresh_outcomes_and_replacements_are_logged(caplog):
    cache, meta, clock = make()
    with caplog.at_level(logging.DEBUG, "reference_engine.cache"):
        meta.publish("a", instance_id="one")
        cache.lookup("a")
        meta.error = OSError("store unreachable")
        clock.advance_ms(TTL_MS + 1)
        cache.lookup("a")
        with pytest.raises(LookupFailed):
            cache.lookup("a", force=True)
        meta.error = None
        meta.publish("a", instance_id="two", port=2000)
        cache.lookup("a", force=True)
        meta.publish("b", instance_id=None)
        cache.lookup("b")
    lines = _cache_log(caplog)
    assert ("DEBUG", "refresh of a ok") in lines
    assert ("WARNING", "ordinary refresh of a failed, keeping the cached snapshot: "
                       "OSError: store unreachable") in lines
    assert ("WARNING", "forced refresh of a failed, no snapshot returned: "
                       "OSError: store unreachable") in lines
    assert ("DEBUG", "refresh of a ok (forced)") in lines
    assert ("INFO", "snapshot of a replaced") in lines
    assert any(level == "WARNING" and "replacement of a observed" in msg and "one" in msg
               and "two" in msg for level, msg in lines), lines
    assert ("INFO", "legacy peer b: descriptor carries no instance_id") in lines


def test_a_lookup_within_the_ttl_logs_nothing(caplog):
    cache, meta, _ = make()
    meta.publish("a")
    cache.lookup("a")
    with caplog.at_level(logging.DEBUG, "reference_engine.cache"):
        for _ in range(3):
            cache.lookup("a")
    assert _cache_log(caplog) == []


def test_another_segments_descriptor_under_the_key_is_rejected_and_keeps_the_old():
    cache, meta, clock = make()
    meta.publish("a", instance_id="one")
    first = cache.lookup("a")
    meta.values["a"] = meta.publish("c", instance_id="other", port=7777)
    clock.advance_ms(TTL_MS + 1)
    assert cache.lookup("a") is first, "an ordinary refresh installed another segment's value"
    with pytest.raises(LookupFailed, match=r"segment 'a': field 'name'.*descriptor of 'c'"):
        cache.lookup("a", force=True)
    assert cache.counters.get("refresh_failed") == 2 and cache.counters.get("replacements") == 0


def test_legacy_installs_whatever_the_key_holds():
    cache, meta, _ = make(LEGACY)
    meta.values["a"] = meta.publish("c", instance_id=None)
    assert cache.lookup("a").name == "c"
