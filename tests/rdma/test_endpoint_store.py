"""Endpoint stores: FIFO and Mooncake's SIEVE (visited=True on insert), retire, reclaim."""

import logging

import pytest

from reference_engine.rdma.counters import Counter
from reference_engine.rdma.endpoint import DESTROYED, DESTROYING, Endpoint
from reference_engine.rdma.endpoint_store import EndpointStore
from reference_engine.rdma.sim.virtual_clock import VirtualClock


def _store(kind, capacity=3):
    store = EndpointStore(capacity, kind)
    store.clock = VirtualClock()
    evicted = []
    store.on_evict = lambda ep: (evicted.append(ep.peer_nic_path), store.retire(ep, "eviction"))
    return store, evicted


def _ins(store, path):
    return store.insert(path, lambda: Endpoint(None, path, 0))


def test_fifo_evicts_oldest_regardless_of_use():
    store, evicted = _store("FIFO", 2)
    _ins(store, "a")
    _ins(store, "b")
    store.get("a")
    _ins(store, "c")
    assert evicted == ["a"]
    assert sorted(store.map) == ["b", "c"]


def test_sieve_marks_new_entries_visited_so_a_recently_used_entry_can_be_evicted():
    # Textbook SIEVE would evict the never-touched "b"; Mooncake's inserts with visited=True,
    # so the sweep clears both bits and evicts the tail "a" although it was just read.
    store, evicted = _store("SIEVE", 2)
    _ins(store, "a")
    _ins(store, "b")
    store.get("a")
    _ins(store, "c")
    assert evicted == ["a"]
    assert store.order.order() == [("c", True), ("b", False)]


def test_sieve_hand_moves_toward_front_and_survives_deleting_its_entry():
    store, evicted = _store("SIEVE", 3)
    for p in "abc":
        _ins(store, p)
    _ins(store, "d")                      # sweep clears a,b,c; evicts a; hand -> b
    assert evicted == ["a"] and store.order.hand.key == "b"
    store.get("b")
    _ins(store, "e")                      # b visited -> cleared, c unvisited -> evicted
    assert evicted == ["a", "c"] and store.order.hand.key == "d"
    store.remove(store.map["d"])          # deleting the hand's entry moves it toward the front
    assert store.order.hand.key == "e"


def test_retire_is_one_idempotent_two_phase_path():
    store, _ = _store("SIEVE")
    ep = _ins(store, "p")
    ep.depth = [Counter()]
    ep.depth[0].add(1)
    assert store.retire(ep, "cq_error") is True
    assert store.retire(ep, "qp_fatal") is False
    assert "p" not in store.map and not ep.in_map and not ep.postable
    assert ep.state == DESTROYING and store.waiting == [ep]
    assert store.retire_log == [("cq_error", "p", 0)]
    assert store.reclaim(store.clock.now(), 30.0, lambda e: pytest.fail("forced")) == 0
    ep.depth[0].add(-1)
    assert store.reclaim(store.clock.now(), 30.0, lambda e: pytest.fail("forced")) == 1
    assert ep.state == DESTROYED and store.waiting == []


def test_a_retirement_is_logged_once_with_its_endpoint_generation_and_cause(caplog):
    """MR-15's operators see every endpoint retired: the one retire path logs the peer NIC
    path, the generation and the cause, once per endpoint generation (a second retire of the
    same one is a no-op and logs nothing). No target reads the RDMA transport's log (the
    reference's runs on the simulator), so this is a project test."""
    store, _ = _store("SIEVE")
    ep = store.insert("B@mlx5_0", lambda: Endpoint(None, "B@mlx5_0", 7))
    with caplog.at_level(logging.INFO, logger="reference_engine.rdma"):
        store.retire(ep, "qp_fatal")
        store.retire(ep, "cq_error")
    lines = [r.getMessage() for r in caplog.records if "retired" in r.getMessage()]
    assert lines == ["endpoint B@mlx5_0 generation 7 retired (qp_fatal)"], lines


def test_reclaim_forces_after_timeout_and_hands_over_the_outstanding_work():
    store, _ = _store("FIFO")
    ep = _ins(store, "p")
    ep.depth = [Counter()]
    ep.depth[0].add(2)
    store.retire(ep, "disconnect_all")
    forced = []
    assert store.reclaim(store.clock.now() + 29.9, 30.0, forced.append) == 0
    assert store.next_deadline(30.0) == pytest.approx(store.clock.now() + 30.0)
    assert store.reclaim(store.clock.now() + 30.0, 30.0, forced.append) == 1
    assert forced == [ep] and ep.state == DESTROYED


def test_remove_compares_identity_so_stale_pointers_are_harmless():
    store, _ = _store("SIEVE")
    old = _ins(store, "p")
    store.retire(old, "cq_error")
    new = _ins(store, "p")
    assert store.remove(old) is False
    assert store.map["p"] is new


def test_bad_store_type_is_named():
    with pytest.raises(ValueError, match="MC_ENDPOINT_STORE_TYPE"):
        EndpointStore(4, "LRU")


@pytest.mark.parametrize("kind,expected", [("FIFO", 2), ("SIEVE", 3)])
def test_total_qp_number_keeps_mooncakes_fifo_sieve_inconsistency(kind, expected):
    store, _ = _store(kind)
    live, retired = _ins(store, "a"), _ins(store, "b")
    live.qps, retired.qps = [object(), object()], [object()]
    live.depth, retired.depth = [], [Counter()]
    retired.depth[0].add(1)
    store.retire(retired, "cq_error")
    assert store.total_qp_number() == expected
