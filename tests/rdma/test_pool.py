"""Worker pool, tokens, worker models, rail state and the one retire path (CO-1..CO-8)."""

import time

import pytest

from reference_engine.profiles import LEGACY, RFC
from reference_engine.rdma.config import RdmaConfig
from reference_engine.rdma.counters import Counter
from reference_engine.rdma.rail_state import RailTable
from reference_engine.rdma.rdma_policies import DedicatedPollerModel, SharedModel
from reference_engine.rdma.sim.invariants import InvariantChecker
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.sim.sim_verbs import ERROR, FAIL_POST, Fault
from reference_engine.rdma.tokens import TokenPool
from reference_engine.rdma.verbs import AsyncEventType, Opcode, WcStatus

W = Opcode.RDMA_WRITE


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("profile", ["rfc", "legacy"])
def test_free_running_transfer_lands_in_peer_memory(profile):
    cluster = SimCluster(profile, slice_size=4096)
    a = cluster.add_node("A", ["mlx5_0", "mlx5_1"])
    b = cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    payload = bytes(range(256)) * 200
    a.write(0, payload)
    cluster.start()
    try:
        task = a.transport.submit("B", [(W, a.buffer_addr, len(payload), b.buffer_addr + 64)])
        assert _wait(lambda: task.done)
        assert task.status() == "COMPLETED"
        assert b.read(64, len(payload)) == payload
        back = a.transport.submit("B", [(Opcode.RDMA_READ, a.buffer_addr + 100_000, 4096,
                                         b.buffer_addr + 64)])
        assert _wait(lambda: back.done)
        assert a.read(100_000, 4096) == payload[:4096]
    finally:
        assert cluster.stop()


def test_wr_id_is_a_pooled_token_not_the_slice(controlled, settle):
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A")
    b = cluster.add_node("B")
    seen = []

    class Spy:
        def on_wr_posted(self, seq, qp_num, wr_id):
            seen.append(wr_id)

    cluster.fabric.observer = Spy()
    own = a.transport.ownership
    for _ in range(3):
        task = a.transport.submit("B", [(W, a.buffer_addr, 64 * 4096, b.buffer_addr)])
        settle(cluster)
        assert task.status() == "COMPLETED"
    assert len(seen) == 3 * 64
    assert len(set(seen)) == len(seen), "a wr_id was reused for a later post without a new epoch"
    assert len(own.tokens.tokens) <= 64, "tokens are allocated per post instead of pooled"
    assert own.outstanding() == 0


def test_token_release_is_exactly_once_and_old_wr_ids_die():
    pool = TokenPool(initial=1)
    depth, cq = Counter(), Counter()

    class S:
        attempt = 0

    class E:
        generation = 7
        cq_outstanding = cq

    depth.add(1)
    cq.add(1)
    tok = pool.acquire(S(), E(), depth, cq)
    old = tok.wr_id
    assert pool.lookup(old) is tok and tok.generation == 7
    assert pool.release(tok) and not pool.release(tok)
    assert (depth.value, cq.value) == (0, 0)
    again = pool.acquire(S(), E(), depth, cq)
    assert again is tok and again.wr_id != old and pool.lookup(old) is None


def test_shared_model_is_default_and_dedicated_poller_only_on_request():
    cfg = dict(workers=2, shards=8, cqs=1)
    assert isinstance(RFC.rdma.worker_model({}, **cfg), SharedModel)
    assert not isinstance(RFC.rdma.worker_model({}, **cfg), DedicatedPollerModel)
    assert isinstance(RFC.rdma.worker_model({"MC_RDMA_DEDICATED_POLLER": "1"}, **cfg),
                      DedicatedPollerModel)
    assert not isinstance(RFC.rdma.worker_model({"MC_RDMA_DEDICATED_POLLER": "0"}, **cfg),
                          DedicatedPollerModel)
    assert isinstance(LEGACY.rdma.worker_model({}, **cfg), DedicatedPollerModel)
    shared = RFC.rdma.worker_model({}, **cfg)
    assert shared.post_shards(1) == [1, 3, 5, 7] and shared.poll_cqs(0) == [0]
    ded = DedicatedPollerModel(3, 8, 2)
    assert ded.post_shards(0) == [] and ded.poll_cqs(0) == [0, 1]
    assert ded.post_shards(2) == [1, 3, 5, 7]


def test_config_rejects_bad_values_by_name():
    with pytest.raises(ValueError, match="MC_WORKERS_PER_CTX"):
        RdmaConfig.from_env({"MC_WORKERS_PER_CTX": "9"})
    with pytest.raises(ValueError, match="MC_RETRY_CNT"):
        RdmaConfig.from_env({"MC_RETRY_CNT": "many"})
    assert RdmaConfig.from_env({"MC_MAX_WR": "8"}).max_wr == 8


def test_rail_pauses_after_threshold_and_recovers():
    class Clock:
        t = 100.0

        def now(self):
            return self.t

    clock = Clock()
    rails = RailTable(clock, pause_seconds=30)
    for _ in range(4):
        rails.mark_failed("B@n0")
    assert rails.available("B@n0")
    rails.mark_failed("B@n0")
    assert not rails.available("B@n0")
    clock.t += 30
    assert rails.available("B@n0")
    rails.mark_failed("B@n1", immediate=True)
    assert not rails.available("B@n1")
    rails.clear(["B@n1"])
    assert rails.available("B@n1")


def test_bad_wr_counts_only_the_prefix_as_posted(controlled, settle):
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A")
    b = cluster.add_node("B")
    task = a.transport.submit("B", [(W, a.buffer_addr, 4 * 4096, b.buffer_addr)])
    third = task.slices[2]
    cluster.fabric.inject(Fault(FAIL_POST, local_addr=third.source_addr))
    settle(cluster)
    assert task.status() == "COMPLETED"
    assert [s.retry_cnt for s in task.slices] == [0, 0, 1, 1]
    assert [s.attempt for s in task.slices] == [0, 0, 1, 1]
    ctx = a.transport.contexts[0]
    assert ctx.cq_outstanding() == 0 and a.transport.ownership.outstanding() == 0


def _connected(cluster, settle):
    a = cluster.peers["A"]
    b = cluster.peers["B"]
    task = a.transport.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
    settle(cluster)
    assert task.status() == "COMPLETED"
    return a, b


def test_every_deletion_cause_goes_through_the_one_retire_path(controlled, settle):
    cluster = controlled(max_ep_per_ctx=1)
    a = cluster.add_node("A", ["n0"])
    cluster.add_node("B", ["n0", "n1"])
    cluster.add_node("C", ["n0"])
    a, b = _connected(cluster, settle)
    tr = a.transport
    causes = lambda: [c for ctx in tr.contexts for c, _, _ in ctx.store.retire_log]  # noqa: E731

    ep = next(ep for ctx in tr.contexts for ep in ctx.store.endpoints())
    cluster.fabric.raise_qp_fatal(ep.qps[0])
    settle(cluster)
    assert causes() == ["qp_fatal"]

    _connected(cluster, settle)
    tr.disconnect_all()
    settle(cluster)
    assert "disconnect_all" in causes()

    _connected(cluster, settle)
    ctx = next(c for c in tr.contexts if c.store.endpoints())
    cluster.fabric.change_gid(ctx.verbs, "fe80::new")
    settle(cluster)
    assert "gid_change" in causes()

    task = tr.submit("C", [(W, a.buffer_addr, 4096, cluster.peers["C"].buffer_addr)])
    _connected(cluster, settle)
    settle(cluster)
    assert task.status() == "COMPLETED"
    assert "eviction" in causes()

    tr.disconnect_all()
    settle(cluster)
    _connected(cluster, settle)
    assert b.transport.stats["passive_stale"] >= 1
    assert "passive_stale" in [c for ctx in b.transport.contexts
                               for c, _, _ in ctx.store.retire_log]

    cluster.fabric.raise_device_fatal(tr.contexts[0].verbs)
    settle(cluster)
    assert "device_fatal" in causes()
    assert not tr.contexts[0].active
    for c in tr.contexts:
        assert c.store.waiting == [] and c.cq_outstanding() == 0


def test_an_error_completion_retires_its_endpoint_with_no_observer_attached(controlled, settle):
    """An engine runs without an observer (only the simulator's checkers attach one), so the
    CQ-error retire path must not depend on one: the erring endpoint goes through the one retire
    path (CO-5/CO-6) and the slice's retry completes. Not a suite test: every suite run of the
    reference engine attaches an observer, so only here does the retire path run without one."""
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A", ["n0"])
    b = cluster.add_node("B", ["n0"])
    assert a.transport.observer is None
    cluster.fabric.inject(Fault(ERROR, local_addr=a.buffer_addr, status=WcStatus.REM_ACCESS_ERR))
    task = a.transport.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
    settle(cluster)
    assert task.status() == "COMPLETED"
    causes = [c for ctx in a.transport.contexts for c, _, _ in ctx.store.retire_log]
    assert causes == ["cq_error"], causes


def test_the_invariant_checker_is_told_of_every_retry(controlled, settle):
    """The CO-9 checker (the observer the simulator's suites attach) judges CO-4 by each
    slice's owning post, which a retry ends, so the transport tells it of every retry: a
    retry of a slice that already ended is reported as such, not only through the second
    completion it leads to. Not a suite test: the hook feeds the suites' oracle, and a
    correct engine's runs read the same with or without it."""
    checker = InvariantChecker()
    cluster = controlled(slice_size=4096, observer=checker)
    a = cluster.add_node("A", ["n0"])
    b = cluster.add_node("B", ["n0"])
    task = a.transport.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
    checker.track(task.slices)
    settle(cluster)
    assert task.status() == "COMPLETED"
    assert checker.check_final(True) == []
    a.transport.force_retry(task.slices[0])
    settle(cluster)
    kinds = [v.kind for v in checker.violations]
    assert "retry_after_end" in kinds, kinds


def test_async_event_on_dead_context_hands_work_to_another_nic(controlled, settle):
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A", ["n0", "n1"])
    b = cluster.add_node("B", ["n0"])
    cluster.fabric.raise_event(a.transport.contexts[0].verbs, AsyncEventType.PORT_ERR)
    settle(cluster)
    task = a.transport.submit("B", [(W, a.buffer_addr, 8 * 4096, b.buffer_addr)])
    settle(cluster)
    assert task.status() == "COMPLETED"
    assert all(s.ctx_index == 1 for s in task.slices)
