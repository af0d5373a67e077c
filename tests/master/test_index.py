"""Object index, segments (drain lifecycle, allocator) and client TTLs, in one process."""

from __future__ import annotations

import pytest

from reference_engine.master.clients import ClientRegistry, ClientStatus
from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.index import ObjectIndex, drained
from reference_engine.master.model import SegmentInfo
from reference_engine.master.segments import RangeAllocator, SegmentRegistry, SegmentStatus


def make_index(*endpoints: str, capacity: int = 1 << 20) -> ObjectIndex:
    reg = SegmentRegistry()
    for i, ep in enumerate(endpoints):
        reg.mount(SegmentInfo(f"seg{i}", ep, base=(i + 1) << 32, capacity=capacity, client_id=f"c{i}"))
    return ObjectIndex(reg, lease_ttl=5.0, put_start_discard_timeout=30.0)


def put(index: ObjectIndex, key: str, size: int = 100, replicas: int = 1, now: float = 0.0):
    index.put_start("c0", key, size, replicas, now)
    return index.put_end("c0", key)


def test_put_get_exists_remove():
    index = make_index("a:1", "b:1")
    change = put(index, "k", replicas=2)
    assert change.meta is not None and len(change.meta.replicas) == 2
    assert {r.descriptors[0].endpoint for r in change.meta.replicas} == {"a:1", "b:1"}
    assert index.exists("k") and len(index) == 1
    meta = index.get_replica_list("k", now=1.0)
    assert meta.size == 100
    with pytest.raises(MasterError) as e:
        index.remove("k", now=2.0)
    assert e.value.code is ErrorCode.OBJECT_HAS_LEASE
    assert index.remove("k", now=7.0).meta is None
    assert not index.exists("k")
    with pytest.raises(MasterError) as e:
        index.get_replica_list("k", now=8.0)
    assert e.value.code is ErrorCode.OBJECT_NOT_FOUND


def test_incomplete_put_is_invisible_and_conflicts_until_discard_timeout():
    index = make_index("a:1")
    index.put_start("c0", "k", 10, 1, now=0.0)
    assert not index.exists("k")
    with pytest.raises(MasterError) as e:
        index.put_start("c0", "k", 10, 1, now=1.0)
    assert e.value.code is ErrorCode.OBJECT_ALREADY_EXISTS
    index.put_start("c0", "k", 10, 1, now=100.0)
    index.put_end("c0", "k")
    with pytest.raises(MasterError) as e:
        index.put_start("c0", "k", 10, 1, now=200.0)
    assert e.value.code is ErrorCode.OBJECT_ALREADY_EXISTS


def test_bad_put_parameters_name_the_key():
    index = make_index("a:1")
    with pytest.raises(MasterError, match="'k'.*size"):
        index.put_start("c0", "k", 0, 1, 0.0)
    with pytest.raises(MasterError, match="replica_num"):
        index.put_start("c0", "k", 1, 0, 0.0)


def test_no_space_frees_partial_allocation():
    index = make_index("a:1", capacity=150)
    put(index, "k1")
    with pytest.raises(MasterError) as e:
        index.put_start("c0", "k2", 100, 1, 0.0)
    assert e.value.code is ErrorCode.NO_AVAILABLE_HANDLE
    index.remove("k1", now=100.0)
    put(index, "k2")


def test_allocator_never_hands_out_overlapping_ranges_and_coalesces():
    alloc = RangeAllocator(1000, 100)
    a, b, c = alloc.allocate(30), alloc.allocate(30), alloc.allocate(40)
    assert (a, b, c) == (1000, 1030, 1060)
    assert alloc.allocate(1) is None
    alloc.free(b, 30)
    alloc.free(a, 30)
    assert alloc.allocate(60) == 1000
    alloc.free(1000, 60)
    alloc.free(c, 40)
    assert alloc.allocate(100) == 1000
    alloc.free(1000, 100)
    assert alloc.reserve(1010, 10) and not alloc.reserve(1015, 10)
    assert alloc.used == 10


def test_drain_lifecycle_readable_no_new_allocations_then_drained():
    index = make_index("a:1", "b:1")
    keys = [f"k{i}" for i in range(6)]
    for k in keys:
        put(index, k)
    index.segments.set_status("a:1", SegmentStatus.DRAINING)
    for k in keys:
        index.get_replica_list(k, now=0.0)
    for i in range(4):
        change = put(index, f"new{i}")
        assert change.meta.replicas[0].descriptors[0].endpoint == "b:1"
    assert not drained(index, "a:1")
    while index.migrate_from("a:1", limit=2):
        pass
    assert drained(index, "a:1")
    index.segments.set_status("a:1", SegmentStatus.DRAINED)
    index.segments.set_status("a:1", SegmentStatus.UNMOUNTING)
    assert index.drop_segment("a:1") == []
    index.segments.remove("a:1")
    assert all(index.exists(k) for k in keys)


def test_drain_status_transitions_are_checked():
    index = make_index("a:1")
    with pytest.raises(MasterError) as e:
        index.segments.set_status("a:1", SegmentStatus.DRAINED)
    assert e.value.code is ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS
    with pytest.raises(MasterError) as e:
        index.segments.set_status("zz:1", SegmentStatus.DRAINING)
    assert e.value.code is ErrorCode.SEGMENT_NOT_FOUND


def test_unmount_drops_replicas_and_objects_left_without_any():
    index = make_index("a:1", "b:1")
    put(index, "both", replicas=2)
    index.put_start("c0", "only", 10, 1, 0.0)
    index.put_end("c0", "only")
    endpoint = index.get_replica_list("only", 0.0).replicas[0].descriptors[0].endpoint
    changes = {c.key: c.meta for c in index.drop_segment(endpoint)}
    assert changes["only"] is None and len(changes["both"].replicas) == 1
    assert index.exists("both") and not index.exists("only")


def test_remount_is_idempotent_and_conflicts_are_rejected():
    reg = SegmentRegistry()
    info = SegmentInfo("s", "a:1", 0, 10)
    assert reg.mount(info)[1] is True
    assert reg.mount(SegmentInfo("s", "a:1", 0, 10))[1] is False
    with pytest.raises(MasterError, match="capacity"):
        reg.mount(SegmentInfo("s", "a:1", 0, 20))
    with pytest.raises(MasterError, match="already used"):
        reg.mount(SegmentInfo("s", "b:1", 0, 10))


def test_client_ttl():
    clients = ClientRegistry(ttl=3.0)
    assert clients.ping("c", now=0.0) is ClientStatus.NEED_REMOUNT
    clients.admit("c", now=0.0)
    assert clients.ping("c", now=2.0) is ClientStatus.OK
    assert clients.expire(now=4.0) == []
    assert clients.expire(now=5.0) == ["c"]
    assert clients.ping("c", now=5.0) is ClientStatus.NEED_REMOUNT


def test_a_put_takes_as_many_replicas_as_it_asks_for_and_no_more():
    """Placement stops at the replica count: with three OK segments, one replica takes memory
    on one segment only, two on two (the others' allocators untouched)."""
    index = make_index("a:1", "b:1", "c:1")
    one = put(index, "one", replicas=1)
    two = put(index, "two", replicas=2)
    assert len(one.meta.replicas) == 1 and len(two.meta.replicas) == 2
    used = {seg.endpoint: seg.allocator.used for seg in index.segments._segments.values()}
    assert sum(used.values()) == 300, used  # three replicas of 100 bytes, nothing more
