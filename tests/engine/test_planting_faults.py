"""The foreign-descriptor and stale-value helpers of ``pytest_mooncake.planting``, and how real
reference (rfc) engine processes on a real etcd react to them.

What the requirements justify:

- a value that describes another *process* under this segment's key is, for a reader,
  indistinguishable from a replacement (the RFC assumes one legitimate publisher per name): the
  reader moves to the new instance (MR-9), but the owner rejects any transfer outside the
  buffers it registered itself (MR-18), the failure is bounded (MR-12), and the reader recovers
  once the owner's own value is served again;
- a value of another *segment* under this key is not a descriptor of this segment: validation
  (MR-3) must reject it, and an invalid refresh never replaces a valid snapshot (MR-4);
- a stale value: ``instance_id`` has no ordering (MR-7), so a reader cannot tell "older" from
  "newer" and installs what it fetches past the TTL (MR-3); a stale value of the *same*
  instance never triggers replacement cleanup (MR-10); a stale value of a dead instance ends in
  a bounded failure (MR-12), and transfers recover when the current value is back (MR-16).
"""

from __future__ import annotations

import json

import pytest

from pytest_mooncake.planting import (
    Captured,
    buffer_names,
    capture,
    from_another_process,
    plant,
    plant_foreign,
    published,
    serve_stale,
    with_probe_buffer,
)
from pytest_mooncake.targets.reference import ReferenceTarget
from pytest_mooncake.waits import wait_until, within
from reference_engine.profiles import RFC

WAIT = 10.0
TTL_MS = 100


@pytest.fixture(autouse=True)
def _reference_rfc_only(mc_target):
    if not isinstance(mc_target, ReferenceTarget) or mc_target.profile != "rfc":
        pytest.skip("reactions of the reference engine's rfc profile")


@pytest.fixture
def names(tmp_path):
    """Segment names of this test only (engines of other tests share the worker's etcd)."""
    return lambda role: f"{tmp_path.name}-{role}"


def _instance(engine, peer: str) -> str | None:
    """The ``instance_id`` of ``peer`` as ``engine`` resolves it now (None if it cannot)."""
    seen = engine.lookup(peer)
    return seen.descriptor.get("instance_id") if seen.ok else None


def _disjoint(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> bool:
    return all(a + n <= b or b + m <= a for a, n in x for b, m in y)


# ------------------------------------------------------------------ the helpers, on raw JSON


def test_from_another_process_keeps_name_and_endpoint_but_not_identity_or_buffers():
    doc = {"name": "seg-a", "protocol": "tcp", "tcp_data_host": "127.0.0.1",
           "tcp_data_port": 7001, "instance_id": "aa" * 16,
           "buffers": [{"name": "cpu:0", "addr": 1 << 40, "length": 1 << 20}]}
    forged = from_another_process(doc)
    assert {k: forged[k] for k in ("name", "protocol", "tcp_data_host", "tcp_data_port")} == \
        {k: doc[k] for k in ("name", "protocol", "tcp_data_host", "tcp_data_port")}
    assert forged["instance_id"] != doc["instance_id"] and len(forged["instance_id"]) == 32
    assert forged["buffers"][0]["addr"] >= doc["buffers"][0]["addr"] + (1 << 20)
    assert forged["buffers"][0]["addr"] % 4096 == 0
    assert doc["buffers"][0]["addr"] == 1 << 40, "the input was modified"
    donor = {"name": "seg-c", "instance_id": "cc" * 16,
             "buffers": [{"name": "cpu:0", "addr": 1 << 41, "length": 4096}]}
    taken = from_another_process(doc, donor)
    assert taken["name"] == "seg-a" and taken["tcp_data_port"] == 7001
    assert taken["instance_id"] == donor["instance_id"] and taken["buffers"] == donor["buffers"]
    assert "instance_id" not in from_another_process(doc, {"buffers": donor["buffers"]})


def test_capture_and_serve_stale_put_the_old_bytes_back(mc_metadata, names):
    seg = names("a")
    key = mc_metadata.segment_key(seg)
    assert capture(mc_metadata, seg) == Captured(key, None)
    mc_metadata.put(key, b'{"v":1}')
    old = capture(mc_metadata, seg)
    mc_metadata.put(key, b'{"v":2}')
    serve_stale(mc_metadata, old)
    assert mc_metadata.get(key) == b'{"v":1}' and old.doc == {"v": 1}
    serve_stale(mc_metadata, Captured(key, None))
    assert mc_metadata.get(key) is None


# ------------------------------------------------------------------ foreign descriptors


def test_another_process_under_the_key_cannot_reach_memory_the_owner_never_registered(
        mc_engine, mc_metadata, names):
    a = mc_engine(names("a"))
    c = mc_engine(names("c"))
    b = mc_engine(names("b"), ttl_ms=TTL_MS)
    assert b.write(a.segment, 0, b"before-the-fault").ok
    assert _disjoint(a.buffers(), c.buffers()), "precondition: A and C map different memory"
    own = capture(mc_metadata, a.segment)
    forged = from_another_process(own.doc, published(mc_metadata, c.segment))
    before = b.stats()
    plant(mc_metadata, a.segment, forged)
    wait_until(lambda: _instance(b, a.segment) == forged["instance_id"], WAIT,
               "B to install the value planted under A's key")
    assert b.stats()["replacements"] > before["replacements"], (
        "B installed a descriptor of another instance under A's name without treating it as a "
        "replacement (MR-9)")

    result = within(30.0, b.write, a.segment, 0, b"misdirected-data", what="B's write")
    assert not result.ok, (
        "a write addressed with another process's buffers was accepted by A's process; MR-18 "
        "requires the owner to reject transfers outside the buffers it registered itself")
    assert result.retries <= RFC.engine.retry_budget, f"{result.retries} retries (MR-12: bounded)"
    assert a.local_read(0, 16) == b"before-the-fault", "A's memory changed"
    assert c.local_read(0, 16) == bytes(16), "the write reached C's memory"
    assert a.alive() and b.alive()

    serve_stale(mc_metadata, own)  # the owner's own value is back
    wait_until(lambda: b.write(a.segment, 0, b"after-the-fault!").ok, WAIT,
               "B's writes to reach A again once A's own descriptor was served")
    assert a.local_read(0, 16) == b"after-the-fault!"


def test_another_segments_descriptor_under_the_key_is_rejected(mc_engine, mc_metadata, names):
    a = mc_engine(names("a"))
    c = mc_engine(names("c"))
    b = mc_engine(names("b"), ttl_ms=TTL_MS)
    first = b.lookup(a.segment)
    assert first.ok, first.error
    planted = plant_foreign(mc_metadata, a.segment, c.segment)
    assert planted["name"] == c.segment

    forced = b.lookup(a.segment, force=True)
    assert not forced.ok, (
        f"a forced refresh of {a.segment} returned the descriptor of {forced.descriptor['name']}"
        f"; MR-3 requires a fetched value be validated as this segment's descriptor before it "
        f"is installed")
    assert a.segment in forced.error and "name" in forced.error, (
        f"the rejection does not name the segment and the field: {forced.error}")
    seen = b.lookup(a.segment)
    assert seen.ok and seen.descriptor["name"] == a.segment and \
        buffer_names(seen.descriptor) == buffer_names(first.descriptor), (
            f"an invalid value replaced A's valid snapshot: {seen} (MR-4)")
    b.write(a.segment, 0, b"meant-for-seg-a!")
    assert c.local_read(0, 16) == bytes(16), "B's write to A landed in C's memory"


# ------------------------------------------------------------------ stale values


def test_stale_value_of_the_same_instance_is_installed_without_replacement_cleanup(
        mc_engine, mc_metadata, names):
    a = mc_engine(names("a"))
    b = mc_engine(names("b"), ttl_ms=TTL_MS)
    assert b.write(a.segment, 0, b"first-version-ok").ok
    v1 = capture(mc_metadata, a.segment)
    v2 = with_probe_buffer(v1.doc, "probe-v2")
    plant(mc_metadata, a.segment, v2)
    wait_until(lambda: "probe-v2" in buffer_names(b.lookup(a.segment).descriptor), WAIT,
               "B to install A's newer version")
    before = b.stats()

    serve_stale(mc_metadata, v1)
    seen = wait_until(
        lambda: (r := b.lookup(a.segment)).ok and "probe-v2" not in buffer_names(r.descriptor)
        and r, WAIT, "B to install the value the store serves again (MR-3)")
    assert seen.descriptor == json.loads(v1.raw), "B installed something else than the value"
    after = b.stats()
    assert after["replacements"] == before["replacements"], (
        "a stale value of the same instance was taken for a replacement (MR-10)")
    assert after["endpoints_retired"] == before["endpoints_retired"], (
        "a stale value of the same instance retired A's endpoints (MR-10)")
    assert after["snapshots_replaced"] > before["snapshots_replaced"]
    assert b.write(a.segment, 0, b"still-the-same-A").ok
    assert a.local_read(0, 16) == b"still-the-same-A"


@pytest.mark.mc_requires("engine_restart")
def test_stale_value_of_a_dead_instance_fails_bounded_then_recovers(
        mc_engine, mc_metadata, names):
    a = mc_engine(names("a"))
    b = mc_engine(names("b"), ttl_ms=TTL_MS)
    assert b.write(a.segment, 0, b"to-the-first-one").ok
    dead = capture(mc_metadata, a.segment)
    a.kill()
    a.restart()
    current = capture(mc_metadata, a.segment)
    assert current.doc["instance_id"] != dead.doc["instance_id"]
    wait_until(lambda: b.write(a.segment, 0, b"to-the-second-A!").ok, WAIT,
               "B to reach the restarted A")

    serve_stale(mc_metadata, dead)
    wait_until(lambda: _instance(b, a.segment) == dead.doc["instance_id"], WAIT,
               "B to install the value the store serves again (MR-3: no ordering of IDs)")
    before = b.stats()
    result = within(30.0, b.write, a.segment, 16, b"to-a-dead-proces", what="B's write")
    assert not result.ok, "a write to a dead instance's endpoint succeeded"
    assert result.retries <= RFC.engine.retry_budget, f"{result.retries} retries (MR-12: bounded)"
    assert b.stats()["retries_exhausted"] > before["retries_exhausted"]
    assert a.local_read(16, 16) == bytes(16), "the live A received the write"

    serve_stale(mc_metadata, current)
    wait_until(lambda: b.write(a.segment, 16, b"to-the-live-one!").ok, WAIT,
               "B to reach the live A once its current value is served again (MR-16)")
    assert a.local_read(0, 32) == b"to-the-second-A!to-the-live-one!"
