"""Worker pool, tokens, worker models, rail state and the one retire path (CO-1..CO-8)."""

import time
from types import SimpleNamespace

import pytest

from reference_engine.profiles import LEGACY, RFC
from reference_engine.rdma.config import RdmaConfig
from reference_engine.rdma.context import FAILURE_THRESHOLD
from reference_engine.rdma.counters import Counter, SerialCounter
from reference_engine.rdma.rail_state import RailTable
from reference_engine.rdma.rdma_policies import DedicatedPollerModel, SharedModel, TokenOwnership
from reference_engine.rdma.sim.invariants import InvariantChecker
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.sim.sim_verbs import ERROR, FAIL_POST, HOLD, Fault
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
    assert pool.release(tok, old) and not pool.release(tok, old)
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


def test_a_local_nic_whose_work_requests_keep_failing_is_given_up_for_the_other(controlled, settle):
    """A local NIC whose every work request fails with a local error (LOC_*) is given up once
    FAILURE_THRESHOLD polls in a row brought such failures and no success, and its work goes to
    the node's other NIC (the local RNIC handoff). Not a suite test: no requirement says when a
    failing local NIC is given up (CO-10 asks only that the handoff be safe), so this is the
    reference's rule (Mooncake's per-context failure count), stated here."""
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A", ["n0", "n1"])
    b = cluster.add_node("B", ["n0"])
    tr = a.transport
    lkey0 = tr.buffers[0].lkeys[0]
    cluster.fabric.inject(Fault(ERROR, predicate=lambda wr: wr.lkey == lkey0,
                                status=WcStatus.LOC_PROT_ERR, times=None))
    for _ in range(FAILURE_THRESHOLD):  # each transfer's slice on n0 fails at every attempt
        tr.submit("B", [(W, a.buffer_addr, 2 * 4096, b.buffer_addr)])
        settle(cluster)
        if not tr.contexts[0].active:
            break
    assert not tr.contexts[0].active, (
        f"n0 failed every work request with a local error and is still active "
        f"(failure count {tr.contexts[0].failure_count})")
    assert tr.contexts[1].active
    task = tr.submit("B", [(W, a.buffer_addr, 8 * 4096, b.buffer_addr)])
    settle(cluster)
    assert task.status() == "COMPLETED"
    assert all(s.ctx_index == 1 for s in task.slices)


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


def test_a_token_its_completion_takes_during_a_forced_reclaim_is_not_orphaned_again():
    """Free-running, a worker's completion and the monitor's forced reclaim of the endpoint can
    take the endpoint's tokens at the same time: ``orphan()`` lists the endpoint's live tokens,
    and a completion releases one of them before ``orphan()`` reaches it. That token belongs to
    its completion (CO-3: released exactly once): the reclaim must neither release it again
    nor hand its slice to a retry. The interleaving is replayed here step by step (the
    controlled scheduler runs ``orphan()`` in one step, so no suite can place a completion
    inside it)."""
    own = TokenOwnership()
    depth, cq = Counter(), Counter()
    ep = SimpleNamespace(generation=1, cq_outstanding=cq)
    s1, s2 = SimpleNamespace(attempt=0), SimpleNamespace(attempt=0)
    t1 = own.tokens.acquire(s1, ep, depth, cq)
    t2 = own.tokens.acquire(s2, ep, depth, cq)
    depth.add(2)
    cq.add(2)
    release = own.tokens.release

    def release_while_t2_completes(tok, wr_id):
        done = release(tok, wr_id)
        if tok is t1:  # the worker polls t2's completion meanwhile
            assert own.complete(SimpleNamespace(wr_id=t2.wr_id), cq) == (s2, ep, 1, 0)
        return done

    own.tokens.release = release_while_t2_completes
    assert own.orphan(ep) == [(s1, 0)], "the reclaim claimed a token its completion had taken"
    assert (depth.value, cq.value, own.outstanding()) == (0, 0, 0)


@pytest.mark.parametrize("race", ["completion-ended-it", "retry-moved-it-on"])
def test_an_orphan_whose_slice_its_completion_already_handled_is_not_retried(
        controlled, settle, race):
    """The other end of that race: ``orphan()`` took the token first and listed its slice for a
    retry, and the worker that had already looked the token up acts on the completion before
    the monitor gets to the list: a success ends the slice, an error retries it (a new
    attempt). The monitor must then leave the slice alone: a slice is never retried after it
    ended, and only its owning attempt advances its retry count (CO-4, CO-9). The race's
    outcome is set up directly; the suites' explorations reach the second case only through
    the handoff scenario's forced retry between a reclaim and the monitor's next turn."""
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A")
    b = cluster.add_node("B")
    tr = a.transport
    task = tr.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
    if race == "retry-moved-it-on":  # the first attempt and its retry stay in flight
        cluster.fabric.inject(Fault(HOLD, local_addr=a.buffer_addr, tag="held", times=2))
    settle(cluster)
    (s,) = task.slices
    if race == "retry-moved-it-on":
        tr.force_retry(s)  # as the worker's retry on the error completion: a new attempt
        settle(cluster)
        orphan = (s, s.attempt - 1)
    else:
        assert task.status() == "COMPLETED"
        orphan = (s, s.attempt)
    before = (s.status, s.attempt, s.retry_cnt, s.n_success, s.n_failed, tr.stats["retries"])
    tr._orphans.append(orphan)
    settle(cluster)
    assert (s.status, s.attempt, s.retry_cnt, s.n_success, s.n_failed,
            tr.stats["retries"]) == before, "the monitor acted on an orphan its slice had left"
    cluster.fabric.release("held")
    settle(cluster)
    assert task.status() == "COMPLETED" and (s.n_success, s.n_failed) == (1, 0)


class _PostsBetween:
    """The transport's ownership, except that the first ``wr_id`` call of a post (while the
    endpoint builds its work requests, its CQ share decided) runs ``between()`` first: another
    worker's post, placed inside this one."""

    def __init__(self, own, between):
        self.own = own
        self.between = between

    def wr_id(self, s, ep, depth):
        between, self.between = self.between, None
        if between is not None:
            between()
        return self.own.wr_id(s, ep, depth)

    def unpost(self, wr_id, depth, cq):
        self.own.unpost(wr_id, depth, cq)


def test_two_workers_posting_to_two_peers_never_overcommit_their_shared_cq(controlled, settle):
    """A's endpoints to B and to C share A's one CQ (``max_cqe`` 4 entries) and are posted by
    different workers, each under its own endpoint's lock. The CQ's share a post takes must be
    reserved on the CQ itself: here the worker posting to C runs its whole post after the
    worker posting to B decided its share and before it counted it. CO-3: at most 4
    completions outstanding on the CQ of 4 (a NIC overruns a full CQ and loses completions),
    and every slice still completes once. Not a suite test: the controlled scheduler runs a
    post in one step, and a free-running run reaches the window rarely (docs/mutation.md)."""
    checker = InvariantChecker()
    cluster = controlled(slice_size=4096, max_cqe=4, observer=checker)
    a = cluster.add_node("A", ["n0"])
    peers = {p: cluster.add_node(p, ["n0"]) for p in ("B", "C")}
    tr = a.transport
    ctx = tr.contexts[0]
    for p, peer in peers.items():  # both endpoints connected
        warm = tr.submit(p, [(W, a.buffer_addr, 4096, peer.buffer_addr)])
        settle(cluster)
        assert warm.status() == "COMPLETED"
    tasks = {p: tr.submit(p, [(W, a.buffer_addr, 4 * 4096, peer.buffer_addr)])
             for p, peer in peers.items()}
    for task in tasks.values():
        checker.track(task.slices)
    queued = {p: ctx.pool.take_target(p) for p in peers}
    eps = {p: ctx.store.get(queued[p][0].peer_nic_path) for p in peers}
    assert all(len(q) == 4 for q in queued.values()) and all(eps.values())
    left_c = []

    def post_to_c():
        failed, rest = eps["C"].post(queued["C"], tr.ownership, checker)
        assert not failed
        left_c.extend(rest)

    failed, left_b = eps["B"].post(queued["B"], _PostsBetween(tr.ownership, post_to_c), checker)
    assert not failed
    (cq, cq_count), = ctx.cqs
    assert cq_count.high <= cq.cqe, (
        f"two posts to two peers counted {cq_count.high} completions outstanding on A's CQ of "
        f"{cq.cqe} entries (CO-3): each read the CQ's free entries under its own endpoint's "
        f"lock, and both took them")
    for s in left_b + left_c:  # what the full CQ refused waits in its queue, as the worker's
        tr._enqueue(s)
    settle(cluster)
    assert {p: t.status() for p, t in tasks.items()} == {"B": "COMPLETED", "C": "COMPLETED"}
    assert checker.check_final(True) == []


@pytest.mark.parametrize("window", ["before-its-view", "before-its-release"])
def test_a_completion_racing_a_forced_reclaim_never_takes_the_token_a_later_post_reissued(window):
    """Free-running, a worker's completion looks its token up, reads what it names and releases
    it, while the monitor's forced reclaim of the endpoint (at the drain timeout) may release
    the same token first, and a worker's next post may take it from the pool again, for
    another slice. The completion's token is then gone: it must neither release the new
    owner's counters nor act on any slice; the reclaim has already listed the old slice for
    its retry (CO-3: each post's counters released exactly once; CO-4/CO-9: only the owning
    attempt's completion acts on a slice). The race is replayed here step by step, in the two
    windows it has (the controlled scheduler runs a completion in one step)."""
    own = TokenOwnership()
    depth, cq = Counter(), Counter()
    old_ep = SimpleNamespace(generation=1, cq_outstanding=cq)
    new_ep = SimpleNamespace(generation=2, cq_outstanding=cq)
    old, new = SimpleNamespace(attempt=0), SimpleNamespace(attempt=0)
    tok = own.tokens.acquire(old, old_ep, depth, cq)
    depth.add(1)
    cq.add(1)
    wr_id = tok.wr_id
    orphans = []

    def reclaim_and_repost():
        orphans.extend(own.orphan(old_ep))  # the monitor: old_ep's drain timed out
        again = own.tokens.acquire(new, new_ep, depth, cq)  # a worker's next post
        assert again is tok, "precondition: the post took the released token from the pool"
        depth.add(1)
        cq.add(1)

    tokens = own.tokens
    name = "lookup" if window == "before-its-view" else "release"
    real = getattr(tokens, name)

    def racing(*args):
        setattr(tokens, name, real)  # once: the completion's own call
        if name == "lookup":
            found = real(*args)
            reclaim_and_repost()
            return found
        reclaim_and_repost()
        return real(*args)

    setattr(tokens, name, racing)
    view = own.complete(SimpleNamespace(wr_id=wr_id), cq)
    assert orphans == [(old, 0)], "precondition: the reclaim listed the old slice for its retry"
    assert view is None, (
        f"a completion whose token a forced reclaim released and a later post reissued was "
        f"handed {view!r}: it acts on a slice its post no longer owns (CO-4/CO-9)")
    assert (own.outstanding(), depth.value, cq.value) == (1, 1, 1), (
        f"the late completion released the reissued token's counters (outstanding "
        f"{own.outstanding()}, QP depth {depth.value}, CQ {cq.value}; want 1, 1, 1): CO-3")
    assert tokens.lookup(tok.wr_id) is tok and tok.slice is new


def vars_of(rail):
    return None if rail is None else {k: getattr(rail, k) for k in rail.__slots__}


@pytest.mark.parametrize("failure", ["work_request", "handshake"])
def test_recovered_failures_on_a_peers_only_path_never_pause_it(controlled, settle, failure):
    """B has one NIC, so A has one path to it. Transfer after transfer meets one recoverable
    failure on that path, a remote error completion (REM_ACCESS_ERR) or a refused handshake,
    and recovers on its retry. A path is paused only when the slice has another one to take
    (Mooncake's WorkerPool since 0.3.12: "no alternate peer RNIC is available; retrying
    without pausing peer rail"), so the tenth such transfer recovers as the first did. MR-12:
    a recoverable failure is retried within the existing budget; a pause of the only path
    fails the retry at once with its budget left. (With REM_ACCESS_ERR the reference used to
    count the errors and pause the path at the fifth: docs/mutation.md.)"""
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A", ["n0"])
    b = cluster.add_node("B", ["n0"])
    tr = a.transport
    rpc = tr.rpc
    refuse = []

    def flaky(server, request):
        if refuse:
            refuse.pop()
            raise ConnectionRefusedError(f"no handshake listener for {server!r}")
        return rpc(server, request)

    tr.rpc = flaky
    for i in range(10):
        if failure == "work_request":
            cluster.fabric.inject(Fault(ERROR, local_addr=a.buffer_addr,
                                        status=WcStatus.REM_ACCESS_ERR))
        else:
            tr.disconnect_all()  # the next post handshakes again, and that handshake fails
            refuse.append(True)
        task = tr.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
        settle(cluster)
        (s,) = task.slices
        assert not refuse and s.retry_cnt == 1, f"precondition: transfer {i + 1} failed once"
        assert task.status() == "COMPLETED", (
            f"transfer {i + 1}, whose one {failure} failure on A's only path to B was "
            f"recoverable, ended {task.status()} with {s.max_retry_cnt - s.retry_cnt} of its "
            f"retry budget left (rail to B: {vars_of(tr.rails.rails.get(s.peer_nic_path))}): "
            f"MR-12")


def test_a_remote_error_pauses_the_failed_path_at_once_when_the_peer_has_another(
        controlled, settle):
    """The other half of the rail rule: B has two NICs, and a remote error completion on A's
    path to one of them pauses that path at once (the slice has another to take), so the
    slices of A's next transfer to B all go to the other path. Not a suite test: no requirement
    says a failed peer path is avoided by later transfers (MR-12 asks only that the failed
    slice's retry reselect its path); it is Mooncake's rail rule, which the reference keeps."""
    cluster = controlled(slice_size=4096)
    a = cluster.add_node("A", ["n0"])
    b = cluster.add_node("B", ["n0", "n1"])
    tr = a.transport
    cluster.fabric.inject(Fault(ERROR, local_addr=a.buffer_addr, status=WcStatus.REM_ACCESS_ERR))
    first = tr.submit("B", [(W, a.buffer_addr, 4096, b.buffer_addr)])
    failed_path = first.slices[0].peer_nic_path
    settle(cluster)
    assert first.status() == "COMPLETED" and first.slices[0].retry_cnt == 1
    task = tr.submit("B", [(W, a.buffer_addr, 8 * 4096, b.buffer_addr)])
    settle(cluster)
    assert task.status() == "COMPLETED"
    paths = sorted({s.peer_nic_path for s in task.slices})
    assert failed_path not in paths, (
        f"a remote error on A's path {failed_path} to B, which has another, left it in use: "
        f"the next transfer's slices took {paths}")


@pytest.mark.parametrize("counter", [Counter, SerialCounter])
def test_a_take_reserves_at_most_the_free_entries_and_the_high_remembers_it(counter):
    """``take(n, limit)`` is how a post reserves its share of a CQ shared with other workers'
    posts: all of ``n`` when there is room, what is left when there is less, nothing when the
    queue is full, and ``high`` remembers the most it reached (the CO-3 checker's evidence of
    an overrun CQ, ``over_capacity``). Not a suite test: with the reservation right, a CQ never
    overruns, so ``high`` reads the same to every suite whether it is kept or not; and the
    suites post mostly under the controlled scheduler, where the lock-free counter serves."""
    c = counter("cq")
    assert c.take(3, 4) == 3 and (c.value, c.high) == (3, 3)
    assert c.take(3, 4) == 1 and (c.value, c.high) == (4, 4)
    assert c.take(1, 4) == 0 and c.take(0, 4) == 0 and (c.value, c.high) == (4, 4)
    c.add(-4)
    assert c.take(1, 4) == 1 and (c.value, c.high, c.low) == (1, 4, 0)
    c.add(-1)
    assert c.take(6, 8) == 6 and (c.value, c.high) == (6, 6)
