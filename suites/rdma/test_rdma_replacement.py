"""MR-9..MR-13 on the RDMA path: a peer replaced under the same segment name, NIC names,
addresses and rkeys; the same instance republishing; recovery from transport failures; no
deadlock between lookup, refresh and replacement.

The black-box tests run on every target with ``rdma_control`` (a real build: engine processes
on emulated RDMA devices, the peer killed with SIGKILL and started again under its name and
buffer address); they judge transfers, bytes and what A's NICs saw. The tests that read the
transport's own state (endpoint generations, rail state, queued slices) or force a metadata
refresh need ``rdma_state`` / a forced refresh, which a real build may lack (n/a with its
probed reason).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mc_requires("rdma_control")
SLICE = 4096


def cluster_with_traffic(mc_completions, controlled: bool = True, a_nics=("mlx5_0",),
                         length: int = 4096, **config):
    cluster = mc_completions.cluster(controlled=controlled, **config)
    cluster.add_node("A", a_nics)
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    t = cluster.submit("A", "B", length)
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    return cluster


def to_b(endpoints):
    return [e for e in endpoints if e["peer_nic_path"].startswith("B@")]


def ids(before: dict, after: dict) -> str:
    return f"instance {short(before['instance_id'])} -> {short(after['instance_id'])}"


def short(instance_id: str | None) -> str:
    return f"{instance_id[:8]}.." if instance_id else "none"


def live_qps_to(cluster, node: str, peer: str) -> set[int]:
    return {q["qp_num"] for q in cluster.qps(node) if q["peer"] == peer and q["state"] == "rts"}


def payload(tag: bytes, length: int) -> bytes:
    return (tag * (length // len(tag) + 1))[:length]


@pytest.mark.mc_req("MR-9", "MR-11")
@pytest.mark.mc_requires("rdma_state")
def test_replaced_peer_old_endpoints_retired_transfer_completes_on_new(mc_completions):
    cluster = cluster_with_traffic(mc_completions, checked=True)
    old = [e for e in cluster.endpoints("A") if e["peer_nic_path"].startswith("B@")]
    cluster.restart_peer("B")
    cluster.write_local("A", 0, b"to-the-new-B!!!!" * 256)
    cluster.refresh("A", "B")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle()
    retired = {(r["peer_nic_path"], r["generation"]) for r in cluster.retired("A")}
    leftover = [e for e in old if (e["peer_nic_path"], e["generation"]) not in retired]
    assert not leftover, (
        f"B restarted as a new instance with the same NIC names, addresses and rkeys; A kept "
        f"{len(leftover)} endpoint(s) of the old instance ({leftover}); MR-9 requires every "
        f"endpoint of the old instance be retired, MR-11 that the replacement be detected even "
        f"when those fields are reused")
    assert cluster.status(t) == "COMPLETED", f"the transfer to the new B ended {cluster.status(t)}"
    assert cluster.read("B", 0, 4096) == b"to-the-new-B!!!!" * 256, "the data did not reach the new B"
    assert not cluster.check()


@pytest.mark.mc_req("MR-9")
@pytest.mark.mc_requires("rdma_state")
def test_replacement_clears_rail_state_of_the_old_paths(mc_completions):
    # a pause long enough that only the replacement, not its expiry, can lift it
    cluster = cluster_with_traffic(mc_completions, rail_pause_seconds=3600.0)
    t = cluster.submit("A", "B", 4096, dst_offset=4096)
    cluster.inject_error(t, 0, "REM_ACCESS_ERR")
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    bad = {p: r for p, r in cluster.rails("A").items() if p.startswith("B@") and r["paused"]}
    assert bad, (f"precondition: an error completion on a path to B paused no rail of A "
                 f"(rails {cluster.rails('A')})")
    old = cluster.descriptor("B")
    cluster.restart_peer("B")
    new = cluster.descriptor("B")
    assert cluster.refresh("A", "B"), "A's forced refresh of B's new descriptor failed"
    left = {p: r for p, r in cluster.rails("A").items()
            if p.startswith("B@") and (r["paused"] or r["errors"])}
    assert not left, (
        f"A paused rail(s) {sorted(bad)} to B after an error completion; B then restarted as a "
        f"new process ({ids(old, new)}) and A refreshed its descriptor, yet A still holds "
        f"failure/pause state for the old instance's paths: {left}. Expected no rail state for "
        f"them; MR-9 requires the rail failure/pause state of the old instance's paths be "
        f"cleared on a new instance_id")


@pytest.mark.mc_req("MR-9")
@pytest.mark.mc_requires("rdma_state")
def test_queued_slices_are_rebuilt_from_the_new_descriptor(mc_completions):
    cluster = cluster_with_traffic(mc_completions, checked=True)
    old = cluster.descriptor("B")
    cluster.restart_peer("B", same_rkeys=False)
    new = cluster.descriptor("B")
    old_rkeys, new_rkeys = old["buffers"][0]["rkey"], new["buffers"][0]["rkey"]
    assert set(old_rkeys).isdisjoint(new_rkeys), (
        f"precondition: the restarted B registered its buffer under new rkeys "
        f"(old {old_rkeys}, new {new_rkeys})")
    payload = b"rebuilt-for-new!" * 512
    cluster.write_local("A", 8192, payload)
    t = cluster.submit("A", "B", len(payload), src_offset=8192, dst_offset=8192)
    queued = cluster.queued("A")
    assert queued == len(cluster.slices(t)), (
        f"precondition: the transfer's slices are still queued ({queued} queued)")
    assert cluster.refresh("A", "B"), "A's forced refresh of B's new descriptor failed"
    wrong = []
    for i, s in enumerate(cluster.slices(t)):
        path = s["peer_nic_path"]
        want = new_rkeys[new["paths"].index(path)] if path in new["paths"] else None
        if s["dest_rkey"] != want:
            wrong.append(f"slice {i}: path {path}, rkey {s['dest_rkey']:#x} (the new descriptor "
                         f"gives {want if want is None else hex(want)})")
    assert not wrong, (
        f"B restarted ({ids(old, new)}) and registered its buffer under rkeys "
        f"{[hex(k) for k in new_rkeys]} (old {[hex(k) for k in old_rkeys]}); A saw the new "
        f"instance while {queued} slice(s) to B were still queued, yet they still carry the old "
        f"binding: {'; '.join(wrong)}. MR-9 requires queued slices be rebuilt from the new "
        f"descriptor")
    assert cluster.settle() and cluster.status(t) == "COMPLETED", (
        f"the rebuilt transfer ended {cluster.status(t)}")
    retried = [(i, s["retry_cnt"]) for i, s in enumerate(cluster.slices(t)) if s["retry_cnt"]]
    assert not retried, (
        f"rebuilt slices were retried ({retried} as (slice, retries)): they were posted with a "
        f"stale binding first; MR-9 requires rebuilding them from the new descriptor before use")
    assert cluster.read("B", 8192, len(payload)) == payload, "the data did not reach the new B"
    assert not cluster.check()


@pytest.mark.mc_req("MR-9")
@pytest.mark.mc_requires("rdma_state")
def test_new_endpoints_are_made_lazily(mc_completions):
    # two local NICs and a two-slice transfer: A has an endpoint to each of B's two NICs
    cluster = cluster_with_traffic(mc_completions, a_nics=("mlx5_0", "mlx5_1"), length=8192,
                                   checked=True)
    old_eps = to_b(cluster.endpoints("A"))
    assert len({e["peer_nic_path"] for e in old_eps}) == 2, (
        f"precondition: A has endpoints to both of B's NICs ({old_eps})")
    old_gens = {(e["nic"], e["peer_nic_path"], e["generation"]) for e in old_eps}
    old = cluster.descriptor("B")
    cluster.restart_peer("B")
    new = cluster.descriptor("B")
    assert cluster.refresh("A", "B"), "A's forced refresh of B's new descriptor failed"
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    held = to_b(cluster.endpoints("A"))
    stale = [e for e in held if (e["nic"], e["peer_nic_path"], e["generation"]) in old_gens]
    assert not held, (
        f"B restarted ({ids(old, new)}) and A refreshed its descriptor; with no transfer to B "
        f"pending A holds {len(held)} active endpoint(s) to B: {held} "
        + (f"({len(stale)} of the old instance, never retired)" if stale else
           "(made for the new instance before any transfer needed them)")
        + ". Expected none; MR-9 requires the old instance's endpoints be retired and new "
          "endpoints be made lazily")
    passive = cluster.endpoints("B")
    assert not passive, (
        f"no transfer to B was pending, yet the new B already accepted {len(passive)} "
        f"endpoint(s) (a handshake ran): {passive}; MR-9 requires new endpoints be made lazily")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle() and cluster.status(t) == "COMPLETED", (
        f"the first transfer to the new B ended {cluster.status(t)}")
    used = {s["peer_nic_path"] for s in cluster.slices(t)}
    made = to_b(cluster.endpoints("A"))
    assert {e["peer_nic_path"] for e in made} == used and len(made) == len(used), (
        f"one 4 KiB transfer to the new B went over {sorted(used)}; A now holds endpoints "
        f"{made}. Expected exactly one new endpoint per path that transfer used; MR-9 requires "
        f"new endpoints be made lazily, when a transfer needs them")
    newest_old = max(g for _, _, g in old_gens)
    assert all(e["generation"] > newest_old for e in made), (
        f"the endpoint(s) to the new B {made} are not newer than the old instance's "
        f"(generations up to {newest_old}); MR-9 requires new endpoints for the new instance")
    assert not cluster.check()


@pytest.mark.mc_req("MR-10")
@pytest.mark.mc_requires("rdma_state")
def test_same_instance_retires_nothing(mc_completions):
    cluster = cluster_with_traffic(mc_completions)
    before = cluster.retired("A")
    cluster.restart_peer("B", same_instance=True)
    cluster.refresh("A", "B")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    cleanup = [r for r in cluster.retired("A")[len(before):] if r["cause"] == "replacement"]
    assert not cleanup, (
        f"B came back under the same instance_id and A ran replacement cleanup on {cleanup}; "
        f"MR-10 forbids replacement cleanup for the same instance_id (endpoints that fail may "
        f"still be retired as transport failures)")


@pytest.mark.mc_req("MR-12")
def test_transport_failure_recovers_on_the_replaced_peer(mc_completions):
    cluster = cluster_with_traffic(mc_completions, checked=True)
    cluster.restart_peer("B")
    data = b"to-the-replaced!" * (SLICE // 16)
    cluster.write_local("A", SLICE, data)
    t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    assert cluster.settle()
    assert cluster.status(t) == "COMPLETED", (
        f"B was replaced without A noticing; A's next transfer ended {cluster.status(t)} instead "
        f"of recovering through retire, forced refresh and a bounded retry (MR-12)")
    assert cluster.read("B", SLICE, SLICE) == data, "the bytes did not reach the new B"
    found = cluster.check()
    assert not found, f"after recovering on the replaced peer: {found}"


@pytest.mark.mc_req("MR-12")
def test_transport_failure_recovers_on_a_peer_replaced_under_new_rkeys(mc_completions):
    """B is replaced by a process that registered its buffer under other rkeys, and A has not
    noticed: A's next transfer meets an error completion (the old rkey), and only a forced
    refresh before the retry gives it the key that works. MR-12: the retry reselects the
    buffer, device, rkey and NIC path from a forced refresh."""
    cluster = cluster_with_traffic(mc_completions, checked=True)
    cluster.restart_peer("B", same_rkeys=False)
    data = b"new-rkeys-reach!" * (SLICE // 16)
    cluster.write_local("A", 2 * SLICE, data)
    t = cluster.submit("A", "B", SLICE, src_offset=2 * SLICE, dst_offset=2 * SLICE)
    assert cluster.settle()
    assert cluster.status(t) == "COMPLETED", (
        f"B was replaced by a process that registered its buffer under other rkeys; A's next "
        f"transfer ended {cluster.status(t)} instead of recovering through retire, forced "
        f"refresh and a retry with the new descriptor's rkey (MR-12)")
    assert cluster.read("B", 2 * SLICE, SLICE) == data, "the bytes did not reach the new B"
    found = cluster.check()
    assert not found, f"after recovering on the replaced peer: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_qp_fatal_with_work_in_flight_is_retried_to_completion(mc_completions):
    """A's QP to B turns fatal while one of the transfer's slices is held on the wire: its
    flushed work requests come back as error completions. MR-12: a QP failure is recoverable;
    the endpoint is retired and the slices are retried (B has a second NIC, and A can build a
    new QP to either) until the transfer completes with every byte at B."""
    cluster, status, landed = qp_fatal_in_flight(
        mc_completions, ("mlx5_0", "mlx5_1"), (b"qp-fatal-retry!!" * (4 * SLICE // 16))[:4 * SLICE],
        held=[2])
    assert status == "COMPLETED", (
        f"A's QP to B turned fatal with a slice in flight, and the transfer ended {status} "
        f"instead of retiring the endpoint and retrying its slices (MR-12: a QP failure is "
        f"recoverable within the retry budget)")
    assert landed, "the bytes at B are not the payload"


def qp_fatal_in_flight(mc_completions, b_nics: tuple[str, ...], data: bytes,
                       held: list[int], checked: bool = False) -> tuple[object, str, bool]:
    """A (one NIC) writes ``data`` to B (``b_nics``); the slices ``held`` are held on the wire
    while A's QPs to B turn fatal, then released: (the cluster, the transfer's status once
    settled, whether B holds ``data``). ``checked``: the caller reads ``check()``."""
    cluster = mc_completions.cluster(checked=checked)
    cluster.add_node("A", ("mlx5_0",))
    cluster.add_node("B", b_nics)
    cluster.write_local("A", 0, data)
    t = cluster.submit("A", "B", len(data))
    for i in held:
        cluster.hold(t, i, tag="old", stage="execution")
    assert cluster.settle()
    assert cluster.qp_fatal("A", "B") >= 1, "precondition: A has QPs to B"
    cluster.release("old")
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    return cluster, cluster.status(t), cluster.read("B", 0, len(data)) == data


@pytest.mark.mc_req("MR-12")
@pytest.mark.parametrize("status", ["REM_ACCESS_ERR", "RETRY_EXC_ERR", "LOC_PROT_ERR"])
def test_an_error_completion_is_recovered_on_a_peer_with_one_path(mc_completions, status):
    """A work request fails once (a remote, a transport and a local error) where A and B have
    one NIC each, so the retry can only take the same NIC path again. MR-12: the failed
    endpoint is retired and the slice retried within its budget, over new QPs, to completion
    (a retry on the failed endpoint's QPs, in ERR after the error, would fail at every
    attempt)."""
    cluster = mc_completions.cluster(checked=True)
    cluster.add_node("A", ("mlx5_0",))
    cluster.add_node("B", ("mlx5_0",))
    t = cluster.submit("A", "B", SLICE)
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    old = live_qps_to(cluster, "A", "B")
    assert old, f"precondition: A has live QPs to B ({cluster.qps('A')})"
    data = b"one-error-retry!" * (SLICE // 16)
    cluster.write_local("A", SLICE, data)
    t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    cluster.inject_error(t, 0, status)
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    assert cluster.status(t) == "COMPLETED", (
        f"one work request of the transfer failed ({status}) and the transfer ended "
        f"{cluster.status(t)} after {len(cluster.posts(t, 0))} post(s) of its slice, with a "
        f"retry budget left: MR-12 requires the failed endpoint be retired and the slice "
        f"retried to completion")
    assert cluster.read("B", SLICE, SLICE) == data, "the bytes at B are not the payload"
    kept = old & live_qps_to(cluster, "A", "B")
    assert not kept, (
        f"after a {status} completion A still uses QPs {sorted(kept)} of the endpoint that "
        f"failed; MR-12 requires the failed endpoint be retired")
    found = cluster.check()
    assert not found, f"after recovering from a {status} completion: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_qp_fatal_with_many_work_requests_in_flight_is_retried_on_the_one_path(mc_completions):
    """As ``test_a_qp_fatal_with_work_in_flight_is_retried_to_completion``, where A and B have
    one NIC each and eight of the transfer's work requests are on the wire when the QP turns
    fatal: eight flush completions come back for one QP failure. MR-12: the endpoint is retired
    and the slices retried, over the one NIC path there is, until the transfer completes (the
    flushes are the QP's failure drained, not eight failures of the path)."""
    n = 8
    cluster, status, landed = qp_fatal_in_flight(
        mc_completions, ("mlx5_0",), payload(b"eight-flushed-WRs", n * SLICE), held=list(range(n)),
        checked=True)
    assert status == "COMPLETED", (
        f"A's one QP path to B turned fatal with {n} work requests in flight, and the transfer "
        f"ended {status} instead of retiring the endpoint and retrying its slices on a new one "
        f"(MR-12: a QP failure is recoverable within the retry budget)")
    assert landed, "the bytes at B are not the payload"
    found = cluster.check()
    assert not found, f"after a QP fatal with {n} work requests in flight: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_burst_of_recovered_failures_across_many_peers_completes(mc_completions):
    """A writes to 40 peers at once, over its one NIC, and the first work request to each
    fails with a local error (A's NIC refuses it): 40 failures in one burst, each recoverable,
    each slice retried within its budget. MR-12: every transfer completes. (A build may give
    up a local NIC that keeps failing; one burst, every failure of it recovered, is not that.)"""
    cluster = mc_completions.cluster(checked=True)
    cluster.add_node("A", ("mlx5_0",))
    peers = [f"P{i:02d}" for i in range(40)]
    cluster.add_nodes(peers, ("mlx5_0",))
    transfers = []
    for i, p in enumerate(peers):
        cluster.write_local("A", i * SLICE, payload(p.encode(), SLICE))
        t = cluster.submit("A", p, SLICE, src_offset=i * SLICE)
        cluster.inject_error(t, 0, "LOC_PROT_ERR")
        transfers.append(t)
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    ended = {p: cluster.status(t) for p, t in zip(peers, transfers, strict=True)}
    bad = {p: s for p, s in ended.items() if s != "COMPLETED"}
    assert not bad, (
        f"{len(bad)} of 40 transfers, each of whose first work request failed once with a "
        f"local error, did not complete ({bad}): MR-12 requires each recoverable failure be "
        f"retried within the budget")
    wrong = [p for p in peers if cluster.read(p, 0, SLICE) != payload(p.encode(), SLICE)]
    assert not wrong, f"the bytes at {wrong} are not their payloads"
    found = cluster.check()
    assert not found, f"after 40 local errors in one burst: {found}"


@pytest.mark.mc_req("MR-12")
def test_recovered_work_request_failures_never_add_up(mc_completions):
    """A long run of transfers, each of which meets one local error completion (a WR refused
    by A's own NIC) and recovers on its retry: every one is a recoverable failure, so the
    fortieth transfer is retried to completion as the first was. (A build may give up a local
    NIC after failures in a row; here a success follows every failure.)"""
    cluster = mc_completions.cluster(checked=True)
    cluster.add_node("A", ("mlx5_0",))
    cluster.add_node("B", ("mlx5_0",))
    for i in range(40):
        data = payload(f"run {i:02d} ".encode(), SLICE)
        cluster.write_local("A", 0, data)
        t = cluster.submit("A", "B", SLICE)
        cluster.inject_error(t, 0, "LOC_PROT_ERR")
        cluster.settle()  # at its deadline NotQuiescent says what the build left undone
        assert cluster.status(t) == "COMPLETED", (
            f"transfer {i + 1} of 40, each failing once with a local error and recovering, "
            f"ended {cluster.status(t)} after {len(cluster.posts(t, 0))} post(s): the "
            f"{i} failures recovered before it were charged to A as if in a row, and A gave "
            f"up its NIC; MR-12 requires a recoverable failure be retried within the budget")
        assert cluster.read("B", 0, SLICE) == data, f"transfer {i + 1}: the bytes at B differ"
    found = cluster.check()
    assert not found, f"after 40 recovered local errors: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_peer_failing_every_work_request_leaves_other_peers_reachable(mc_completions):
    """B stops answering: every work request A posts to it fails (retry exceeded), for six
    transfers in a row, each ending within its budget. Those are failures of B's paths, not
    of A's NIC: A's transfer to C, over the same local NIC, still completes (MR-12: a transport
    failure retires the failed endpoint, not what A's other transfers use)."""
    cluster = mc_completions.cluster(checked=True)
    cluster.add_node("A", ("mlx5_0",))
    cluster.add_node("B", ("mlx5_0",))
    cluster.add_node("C", ("mlx5_0",))
    t = cluster.submit("A", "C", SLICE)
    completed_ok = cluster.settle() and cluster.status(t) == "COMPLETED"
    assert completed_ok, f"precondition: a first transfer to C ended {cluster.status(t)}"
    for i in range(6):
        t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
        cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=None)
        assert cluster.settle(timeout=60), "a transfer to the silent B never ended"
        assert cluster.status(t) == "FAILED", (
            f"every work request to B failed, yet transfer {i + 1} to B ended "
            f"{cluster.status(t)}")
    data = payload(b"C-still-there!", SLICE)
    cluster.write_local("A", 2 * SLICE, data)
    t = cluster.submit("A", "C", SLICE, src_offset=2 * SLICE, dst_offset=2 * SLICE)
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    assert cluster.status(t) == "COMPLETED", (
        f"after six transfers to B failed on B's side (retry exceeded), A's transfer to C "
        f"ended {cluster.status(t)}: the failures of B's paths were charged to A's own NIC. "
        f"MR-12 requires a transport failure retire the failed endpoint and retry within the "
        f"budget, not take down what A's other transfers use")
    assert cluster.read("C", 2 * SLICE, SLICE) == data, "the bytes at C are not the payload"
    found = cluster.check()
    assert not found, f"after transfers to a silent peer: {found}"


@pytest.mark.mc_req("MR-12")
def test_retries_are_bounded(mc_completions):
    """Every attempt of a slice fails (retry exceeded): the transfer must fail, after at most
    the retry budget's posts, never retry forever. The budget is Mooncake's: a slice is
    retried while its retry count, raised at each failure, stays below ``MC_RETRY_CNT``, so
    it is posted at most ``MC_RETRY_CNT`` times in all."""
    budget = 3
    cluster = mc_completions.cluster(retry_cnt=budget, checked=True)
    cluster.add_node("A")
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    t = cluster.submit("A", "B", SLICE)
    cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=None)
    assert cluster.settle(timeout=60), "the failing transfer never ended (retries unbounded?)"
    posts = cluster.posts(t, 0)
    assert cluster.status(t) == "FAILED", (
        f"every attempt failed, yet the transfer ended {cluster.status(t)} after "
        f"{len(posts)} post(s)")
    assert 1 <= len(posts) <= budget, (
        f"with a retry budget of {budget} (MC_RETRY_CNT) the slice was posted {len(posts)} "
        f"times; MR-12 requires retries within the existing retry budget: at most {budget} "
        f"posts of a slice, its first included")
    found = cluster.check()
    assert not found, f"after a transfer exhausted its retries: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_failure_that_recovers_on_the_budgets_last_attempt_completes(mc_completions):
    """The slice's first ``budget - 1`` posts fail (retry exceeded) and the next one would
    succeed: the budget (``MC_RETRY_CNT``, a slice posted at most that many times) still holds
    that last attempt, so the transfer must complete, its bytes at B. MR-12's retries are
    within the existing budget: a smaller one, or one charged twice per failure, fails a
    transfer the budget would have recovered."""
    budget = 3
    cluster = mc_completions.cluster(retry_cnt=budget, checked=True)
    cluster.add_node("A")
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    data = (b"last-attempt-ok!" * (SLICE // 16))[:SLICE]
    cluster.write_local("A", 0, data)
    t = cluster.submit("A", "B", SLICE)
    cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=budget - 1)
    cluster.settle()  # at its deadline NotQuiescent says what the build left undone
    posts = cluster.posts(t, 0)
    assert cluster.status(t) == "COMPLETED", (
        f"the slice's first {budget - 1} posts failed and the next would have succeeded; with a "
        f"retry budget of {budget} (MC_RETRY_CNT: {budget} posts of a slice, its first "
        f"included) the transfer ended {cluster.status(t)} after {len(posts)} post(s). MR-12: "
        f"a recoverable failure is retried within the existing retry budget, all of it")
    assert cluster.read("B", 0, SLICE) == data, "the bytes at B are not the payload"
    found = cluster.check()
    assert not found, f"after a transfer recovered on its last attempt: {found}"


@pytest.mark.mc_req("MR-12")
def test_retries_are_bounded_when_the_budget_outlasts_the_peers_paths(mc_completions):
    """As ``test_retries_are_bounded`` with a budget of 9 (Mooncake's default MC_RETRY_CNT):
    every attempt fails, on each of B's two NICs in turn, so the engine may run out of paths
    it is willing to retry on before it runs out of budget. Either way the transfer must end,
    failed, after at most the budget's posts: a slice left with nowhere to go is failed, not
    left waiting."""
    budget = 9
    cluster = mc_completions.cluster(retry_cnt=budget, checked=True)
    cluster.add_node("A")
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    t = cluster.submit("A", "B", SLICE)
    cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=None)
    cluster.settle(timeout=60)  # at its deadline NotQuiescent says what the build left undone
    posts = cluster.posts(t, 0)
    assert cluster.status(t) == "FAILED", (
        f"every attempt failed ({len(posts)} post(s) to B's two NICs) and the transfer ended "
        f"{cluster.status(t)}: MR-12's retries end within the budget of {budget}, and a slice "
        f"the engine no longer retries must fail")
    assert 1 <= len(posts) <= budget, (
        f"with a retry budget of {budget} (MC_RETRY_CNT) the slice was posted {len(posts)} "
        f"times; MR-12 requires at most {budget} posts of a slice, its first included")
    found = cluster.check()
    assert not found, f"after a transfer exhausted its retries: {found}"


def failing_with_refreshes_refused(mc_completions, budget: int, refusals: int = 50):
    """A transfer of one slice to B (which A has written to before) whose every post fails,
    while the metadata store refuses the next ``refusals`` reads, so each forced refresh a
    retry makes fails. (cluster, transfer, refused reads, posts), once it settled."""
    cluster = cluster_with_traffic(mc_completions, retry_cnt=budget, checked=True)
    t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=None)
    cluster.refuse_metadata(refusals)
    assert cluster.settle(timeout=60), "the failing transfer never ended (retries unbounded?)"
    return cluster, t, cluster.metadata_refused(), cluster.posts(t, 0)


@pytest.mark.mc_req("MR-12")
def test_failed_forced_refreshes_consume_the_retry_budget(mc_completions):
    """Every post of a slice fails and the metadata store refuses every read for a while, so
    each retry's forced refresh fails. A failed forced refresh consumes the retry budget (or
    fails the slice), and no retry goes out on the cached descriptor instead: the slice is
    posted once, and its failed post and failed refreshes together take at most the budget
    (a slice is retried while its retry count, raised at each failure, stays below
    ``MC_RETRY_CNT``), however many reads the store would have refused."""
    budget = 3
    cluster, t, refused, posts = failing_with_refreshes_refused(mc_completions, budget)
    assert cluster.status(t) == "FAILED", (
        f"every post failed and every forced refresh was refused, yet the transfer ended "
        f"{cluster.status(t)}")
    assert refused >= 1, (
        "the slice's posts failed and it was retried without a single metadata read: MR-12 "
        "requires a transport failure to force a refresh before the retry")
    assert refused <= budget, (
        f"with a retry budget of {budget} (MC_RETRY_CNT) the slice's retries made {refused} "
        f"forced refreshes the metadata store refused: failed refreshes were retried without "
        f"charging the budget. MR-12: a failed forced refresh consumes the retry budget or "
        f"fails the transfer; it never loops")
    assert len(posts) == 1, (
        f"every forced refresh was refused ({refused}), yet the slice was posted {len(posts)} "
        f"times: a retry went out on the cached descriptor. MR-12: the retry follows a forced "
        f"refresh; one that fails consumes the budget or fails the transfer")
    assert len(posts) + refused <= budget, (
        f"the slice's failed post and its {refused} failed forced refresh(es) took "
        f"{len(posts) + refused} retries of a budget of {budget} (MC_RETRY_CNT): a failed "
        f"forced refresh was let go without charging the budget (MR-12)")
    found = cluster.check()
    assert not found, f"after a transfer exhausted its retries on failed refreshes: {found}"


@pytest.mark.mc_req("MR-12")
def test_a_forced_refresh_failing_on_the_budgets_last_retry_ends_the_transfer(mc_completions):
    """A budget of 2 (MC_RETRY_CNT): the slice's first post fails and the forced refresh of
    its one retry is refused. That failed refresh takes the last of the budget (or fails the
    transfer outright): the transfer fails there, with no more refreshes while the store
    still refuses them."""
    budget = 2
    cluster, t, refused, posts = failing_with_refreshes_refused(mc_completions, budget)
    assert cluster.status(t) == "FAILED", (
        f"every post failed and every forced refresh was refused, yet the transfer ended "
        f"{cluster.status(t)}")
    assert 1 <= refused and len(posts) + refused <= budget, (
        f"with a retry budget of {budget} the slice was posted {len(posts)} time(s) and made "
        f"{refused} forced refresh(es) the store refused: the refresh that failed on the "
        f"budget's last retry was tried again instead of ending the transfer. MR-12: a failed "
        f"forced refresh consumes the retry budget or fails the transfer; it never loops")
    found = cluster.check()
    assert not found, f"after a transfer exhausted its retries on failed refreshes: {found}"


@pytest.mark.mc_req("MR-15")
@pytest.mark.parametrize("spent_on", ["posts", "refreshes"])
def test_every_exhausted_retry_budget_is_counted_once(mc_completions, spent_on):
    """A one-slice transfer spends its whole retry budget, on failed posts (every post fails)
    or on failed forced refreshes (every post fails and the store refuses every read): A's
    counter of exhausted retry budgets moves by one, whatever the last attempt failed on."""
    budget = 3
    cluster = cluster_with_traffic(mc_completions, retry_cnt=budget)
    before = cluster.counters("A")
    t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    cluster.inject_error(t, 0, "RETRY_EXC_ERR", times=None)
    if spent_on == "refreshes":
        cluster.refuse_metadata(50)
    assert cluster.settle(timeout=60), "the failing transfer never ended"
    after = cluster.counters("A")
    assert cluster.status(t) == "FAILED", (
        f"precondition: every attempt failed and the transfer ended {cluster.status(t)}")
    if "retries_exhausted" not in after:
        pytest.fail(f"MR-15 requires a counter of exhausted retry budgets; A's counters name "
                    f"none ({sorted(after)})", pytrace=False)
    counted = after["retries_exhausted"] - before.get("retries_exhausted", 0)
    assert counted == 1, (
        f"one slice spent its whole retry budget of {budget} on failed {spent_on} and A counted "
        f"{counted} exhausted retry budget(s), not 1; MR-15 requires operators see every "
        f"exhausted retry budget, once")


@pytest.mark.mc_req("MR-9", "MR-11")
def test_replaced_peer_old_qps_retired_transfer_reaches_new(mc_completions):
    """B is killed and started again under its name, NIC names and buffer address. A's next
    transfer must reach the new B, and A's QPs to the old B must be out of use."""
    cluster = cluster_with_traffic(mc_completions, checked=True)
    old = {q["qp_num"] for q in cluster.qps("A") if q["peer"] == "B" and q["state"] == "rts"}
    assert old, f"precondition: A has live QPs to B ({cluster.qps('A')})"
    cluster.restart_peer("B")
    data = b"to-the-new-B!!!!" * (SLICE // 16)
    cluster.write_local("A", 0, data)
    t = cluster.submit("A", "B", SLICE)
    assert cluster.settle()
    assert cluster.status(t) == "COMPLETED", (
        f"B restarted under the same name, NICs and addresses; A's next transfer ended "
        f"{cluster.status(t)}: the replacement was not handled (MR-9, MR-11)")
    assert cluster.read("B", 0, SLICE) == data, "the data did not reach the new B"
    live = {q["qp_num"] for q in cluster.qps("A") if q["state"] == "rts"}
    kept = old & live
    assert not kept, (
        f"B restarted as a new process with the same NIC names and addresses; A kept QPs "
        f"{sorted(kept)} of the old instance live; MR-9 requires every endpoint of the old "
        f"instance be retired, MR-11 that the replacement be detected even when those fields "
        f"are reused")
    found = cluster.check()
    assert not found, f"after the replacement: {found}"


@pytest.mark.mc_req("MR-10")
def test_same_instance_republishing_retires_nothing(mc_completions):
    """B publishes its descriptor again from the same process (another buffer registered): A,
    once it has seen that, keeps its endpoints to B and keeps transferring over them."""
    cluster = cluster_with_traffic(mc_completions, metadata_refresh_seconds=1)
    before = {q["qp_num"] for q in cluster.qps("A") if q["peer"] == "B" and q["state"] == "rts"}
    assert before, f"precondition: A has live QPs to B ({cluster.qps('A')})"
    cluster.republish("B")
    cluster.let_refresh("A", "B")
    t = cluster.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    assert cluster.settle() and cluster.status(t) == "COMPLETED", (
        f"after B republished, A's transfer ended {cluster.status(t)}")
    after = {q["qp_num"] for q in cluster.qps("A") if q["peer"] == "B" and q["state"] == "rts"}
    gone = before - after
    assert not gone, (
        f"B republished its descriptor from the same process and A retired its QPs "
        f"{sorted(gone)} to B; MR-10 forbids replacement cleanup for the same instance")


@pytest.mark.mc_req("MR-13")
def test_transfers_end_while_the_peer_is_replaced_again_and_again(mc_completions):
    """Transfers in flight while B is replaced three times: every one ends (completed or
    failed) within a bound; none hangs, no process wedges."""
    cluster = mc_completions.cluster(controlled=False)
    cluster.add_node("A", ["mlx5_0", "mlx5_1"])
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    cluster.start()
    transfers = []
    for _ in range(3):
        transfers += [cluster.submit("A", "B", 8 * SLICE, src_offset=i * 65536,
                                     dst_offset=i * 65536) for i in range(4)]
        cluster.start()
        cluster.restart_peer("B")
    assert cluster.settle(timeout=90), (
        "transfers did not all end while the peer was replaced: a deadlock or a lost wake-up "
        "(MR-13)")
    stuck = [t for t in transfers if cluster.status(t) == "WAITING"]
    assert not stuck, f"transfers {stuck} never ended (MR-13)"
    assert cluster.alive("A"), "A died while its peer was replaced"
    t = cluster.submit("A", "B", SLICE)
    assert cluster.settle(timeout=60) and cluster.status(t) in ("COMPLETED", "FAILED")


@pytest.mark.mc_req("MR-13")
@pytest.mark.mc_requires("rdma_state")
def test_replaced_endpoints_are_retired_outside_the_target_state_mutex(mc_completions,
                                                                      record_property):
    """A forced refresh finds B replaced: A retires the old instance's endpoints, and MR-13
    requires that happen after the target-state mutex is released (deleting endpoints under
    it is what lets a lookup or a draining completion deadlock against the replacement)."""
    cluster = cluster_with_traffic(mc_completions, a_nics=("mlx5_0", "mlx5_1"), length=8192,
                                   checked=True)
    before = len(cluster.retired("A"))
    cluster.restart_peer("B")
    cluster.refresh("A", "B")
    cluster.submit("A", "B", SLICE)
    assert cluster.settle(), "A's transfer to the replaced B never ended (MR-13: no deadlock)"
    retired = cluster.retired("A")[before:]
    if not retired:  # a replacement never noticed is MR-9's finding, not this one's
        note = ("MR-13 lock discipline not judged: A retired no endpoint to the replaced B, "
                "neither on the refresh nor on the transfer after it")
        record_property("unjudged", note)
        print(note)
    held = [r for r in retired if r["under_target_mutex"]]
    assert not held, (
        f"A retired {len(held)} of the replaced B's endpoint(s) while holding its target-state "
        f"mutex: {held}; MR-13 requires endpoints be deleted after that mutex is released")
    assert not cluster.check()


@pytest.mark.mc_req("MR-13")
@pytest.mark.mc_requires("rdma_state")
def test_no_deadlock_between_transfers_refresh_and_replacement(mc_completions):
    cluster = mc_completions.cluster(controlled=False, checked=True)
    cluster.add_node("A", ["n0", "n1"])
    cluster.add_node("B", ["n0", "n1"])
    transfers = []
    for _ in range(4):
        transfers += [cluster.submit("A", "B", 8 * 4096, src_offset=i * 65536,
                                     dst_offset=i * 65536) for i in range(4)]
        cluster.restart_peer("B")
        cluster.refresh("A", "B")
    assert cluster.settle(timeout=60), (
        "free-running workers did not finish their transfers while the peer was replaced and "
        "refreshed concurrently: a deadlock or a lost wake-up (MR-13)")
    assert not [v for v in cluster.check() if v.kind in ("no_quiescence", "stuck_slice")]
