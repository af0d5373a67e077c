"""Completion control: holding, releasing and failing completions of a running process, async
event injection, port state, counters, chaos mode and what a crash leaves behind."""

from __future__ import annotations

import os
import time

import pytest
from verbs_peers import (
    EVENT_DEVICE_FATAL,
    EVENT_GID_CHANGE,
    EVENT_PORT_ACTIVE,
    EVENT_PORT_ERR,
    EVENT_QP_FATAL,
    PORT_ACTIVE,
    PORT_DOWN,
    QPS_ERR,
    QPS_INIT,
    QPS_RESET,
    QPS_RTS,
    WC_REM_ACCESS_ERR,
    WC_RETRY_EXC_ERR,
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    WRITE,
    Endpoint,
    connected_pair,
)

from pytest_mooncake.verbs import ProcessGone, VerbsControl, VerbsControlError

IBV_QP_STATE = 1
EVENT_WAIT_MS = 10000  # another process notices a host-wide change within its 50 ms tick


def statuses(wcs):
    return [(w["wr_id"], w["status"]) for w in wcs]


def write_pattern(a: Endpoint, count: int, size: int = 256) -> list[bytes]:
    chunks = [os.urandom(size) for _ in range(count)]
    a.peer.fill(a.addr, b"".join(chunks).hex())
    return chunks


def test_held_completions_come_back_in_the_order_released(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    rule = ctl.hold(qp=a.qpn, opcode="write", count=2)
    chunks = write_pattern(a, 3)
    assert a.post(WRITE, b, 1, 256, count=3)["rc"] == 0
    held = ctl.wait_held(2)
    assert [(h.wr_id, h.stage, h.status, h.rule, h.qp) for h in held] == [
        (1, "completion", "success", rule, a.qpn), (2, "completion", "success", rule, a.qpn)]
    # the WRs executed: every byte landed although two completions wait
    assert bytes.fromhex(b.peer.read(b.addr, 768)) == b"".join(chunks)
    assert statuses(a.poll_until(1)) == [(3, WC_SUCCESS)]
    assert a.peer.poll(a.cq) == []
    counters = ctl.counters()
    assert counters.held == 2 and counters.qps[a.qpn].held == 2
    assert counters.qps[a.qpn].posted == 3 and counters.qps[a.qpn].cqes == 3
    assert ctl.release([held[1].id, held[0].id]) == 2
    assert statuses(a.poll_until(2)) == [(2, WC_SUCCESS), (1, WC_SUCCESS)]
    (r,) = ctl.rules()
    assert (r.matched, r.taken) == (3, 2)
    assert ctl.held() == [] and ctl.counters().held == 0


def test_threads_name_the_cqs_they_polled(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    assert a.post(WRITE, b, 1, 256)["rc"] == 0
    assert statuses(a.poll_until(1)) == [(1, WC_SUCCESS)]
    (cq,) = ctl.counters().cqs.values()
    (poller,) = [t for t in ctl.threads() if t.polls]
    assert poller.cqs == (cq.id,) and poller.polled == 1
    assert all(t.cqs == () for t in fabric.control(b.peer.pid).threads())


def test_nth_picks_one_completion_and_wr_id_filters(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.hold(nth=3)
    ctl.hold(wr_id=7)
    assert a.post(WRITE, b, 1, 64, count=8)["rc"] == 0
    held = ctl.wait_held(2)
    assert sorted(h.wr_id for h in held) == [3, 7]
    assert [w["wr_id"] for w in a.poll_until(6)] == [1, 2, 4, 5, 6, 8]
    assert ctl.kept_back() == {a.qpn: 2}, "completion-stage holds keep back only themselves"
    assert ctl.unhold() == 2
    assert ctl.release() == 2
    assert sorted(w["wr_id"] for w in a.poll_until(2)) == [3, 7]


def test_releasing_with_an_error_status_fails_the_qp_unless_kept(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.hold(qp=a.qpn, count=2)
    assert a.post(WRITE, b, 1, 64, count=2)["rc"] == 0
    first, second = ctl.wait_held(2)
    assert ctl.release([first.id], status="rem_access_err", keep_qp=True) == 1
    assert statuses(a.poll_until(1)) == [(1, WC_REM_ACCESS_ERR)]
    assert a.peer.qp_state(a.qp) == QPS_RTS
    assert ctl.release([second.id], status="retry_exc_err") == 1
    assert statuses(a.poll_until(1)) == [(2, WC_RETRY_EXC_ERR)]
    assert a.peer.qp_state(a.qp) == QPS_ERR
    assert a.post(WRITE, b, 3, 64)["rc"] == 0
    assert statuses(a.poll_until(1)) == [(3, WC_WR_FLUSH_ERR)]


def test_an_execution_hold_stalls_the_send_queue_until_released(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.hold(stage="execution", nth=2)
    chunks = write_pattern(a, 3)
    assert a.post(WRITE, b, 1, 256, count=3)["rc"] == 0
    (held,) = ctl.wait_held(1)
    assert (held.wr_id, held.stage, held.status) == (2, "execution", None)
    assert statuses(a.poll_until(1)) == [(1, WC_SUCCESS)]
    assert a.peer.poll(a.cq) == []
    # in order: WR 2 and everything behind it wait, nothing of them landed
    assert bytes.fromhex(b.peer.read(b.addr, 768)) == chunks[0] + bytes(512)
    qp = ctl.counters().qps[a.qpn]
    assert (qp.posted, qp.executed, qp.pending, qp.held) == (3, 1, 2, 1)
    # WR 3 is outstanding because of the test, not the application: both are kept back
    assert ctl.kept_back()[a.qpn] == qp.outstanding == 2
    assert ctl.release([held.id]) == 1
    assert statuses(a.poll_until(2)) == [(2, WC_SUCCESS), (3, WC_SUCCESS)]
    assert bytes.fromhex(b.peer.read(b.addr, 768)) == b"".join(chunks)


def test_an_execution_hold_released_as_an_error_never_touches_memory(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.hold(stage="execution")
    write_pattern(a, 2)
    assert a.post(WRITE, b, 1, 256, count=2)["rc"] == 0
    (held,) = ctl.wait_held(1)
    ctl.release([held.id], status="rem_access_err")
    assert statuses(a.poll_until(2)) == [(1, WC_REM_ACCESS_ERR), (2, WC_WR_FLUSH_ERR)]
    assert bytes.fromhex(b.peer.read(b.addr, 512)) == bytes(512)


def test_failing_a_stalled_qp_flushes_its_wrs_and_raises_qp_fatal(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.hold(stage="execution")
    assert a.post(WRITE, b, 1, 64, count=3)["rc"] == 0
    ctl.wait_held(1)
    ctl.fail_qp(a.qpn)
    event = a.peer.async_event(a.ctx, EVENT_WAIT_MS)
    assert event == {"type": EVENT_QP_FATAL, "qpn": a.qpn, "port": 0}
    assert statuses(a.poll_until(3)) == [(i, WC_WR_FLUSH_ERR) for i in (1, 2, 3)]
    assert ctl.held() == []  # the stalled WR went with the flush
    qp = ctl.counters().qps[a.qpn]
    assert (qp.state, qp.flushed, qp.pending) == ("err", 3, 0)


def test_a_held_completion_of_a_destroyed_qp_can_still_arrive(fabric, peers):
    """The stale-completion shape: the QP is gone, its completion is released afterwards."""
    pa = peers()
    a, b = connected_pair(pa, peers())
    spare = pa.qp(a.ctx, a.cq)  # keeps the CQ in use after a's QP is gone
    ctl = fabric.control(pa.pid)
    ctl.hold(qp=a.qpn)
    assert a.post(WRITE, b, 5, 64)["rc"] == 0
    (held,) = ctl.wait_held(1)
    assert pa.destroy_qp(a.qp) == 0
    assert ctl.release([held.id]) == 1
    (wc,) = a.poll_until(1)
    assert (wc["wr_id"], wc["status"], wc["qpn"]) == (5, WC_SUCCESS, a.qpn)
    assert pa.destroy_qp(spare) == 0


def test_port_down_is_host_wide_and_fails_wrs_through_it(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.port_down("mlx5_0")
    assert a.peer.async_event(a.ctx, 0) == {"type": EVENT_PORT_ERR, "qpn": 0, "port": 1}
    assert b.peer.async_event(b.ctx, EVENT_WAIT_MS) == {"type": EVENT_PORT_ERR, "qpn": 0,
                                                         "port": 1}
    assert b.peer.query_port(b.ctx)["state"] == PORT_DOWN
    assert a.post(WRITE, b, 1, 64)["rc"] == 0
    assert statuses(a.poll_until(1)) == [(1, WC_RETRY_EXC_ERR)]
    ctl.port_up("mlx5_0")
    assert a.peer.async_event(a.ctx, 0)["type"] == EVENT_PORT_ACTIVE
    assert b.peer.async_event(b.ctx, EVENT_WAIT_MS)["type"] == EVENT_PORT_ACTIVE
    assert b.peer.query_port(b.ctx)["state"] == PORT_ACTIVE
    a2, b2 = connected_pair(a.peer, b.peer)
    assert a2.post(WRITE, b2, 2, 64)["rc"] == 0
    assert statuses(a2.poll_until(1)) == [(2, WC_SUCCESS)]


def test_a_gid_change_reaches_every_process(fabric, peers):
    pa, pb = peers(), peers()
    ctx_a, ctx_b = pa.open("mlx5_1"), pb.open("mlx5_1")
    fabric.control(pa.pid).inject("gid_change", device="mlx5_1", index=3, gid="::ffff:127.9.9.9")
    assert pa.async_event(ctx_a, 0) == {"type": EVENT_GID_CHANGE, "qpn": 0, "port": 1}
    assert pb.async_event(ctx_b, EVENT_WAIT_MS)["type"] == EVENT_GID_CHANGE
    assert pb.gid(ctx_b, 3) == "00000000000000000000ffff7f090909"


def test_device_fatal_fails_the_qps_and_the_context(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    ctl.inject("device_fatal", device="mlx5_0")
    assert a.peer.async_event(a.ctx, 0)["type"] == EVENT_DEVICE_FATAL
    assert a.peer.qp_state(a.qp) == QPS_ERR
    assert a.peer.query_device(a.ctx)["rc"] == 5  # EIO
    assert b.peer.qp_state(b.qp) == QPS_RTS  # other processes keep their device


def test_a_fatal_device_takes_teardown_and_refuses_bring_up(fabric, peers):
    """As mlx5 firmware in its internal-error state: a QP still goes to RESET (0.3.10 and
    0.3.11 reset theirs on DEVICE_FATAL and count on it) and to ERR; RESET -> INIT is EIO."""
    a, b = connected_pair(peers(), peers())
    fabric.control(a.peer.pid).inject("device_fatal", device="mlx5_0")
    assert a.peer.async_event(a.ctx, 0)["type"] == EVENT_DEVICE_FATAL
    assert a.peer.modify(a.qp, QPS_RESET, IBV_QP_STATE) == 0
    assert a.peer.qp_state(a.qp) == QPS_RESET
    assert a.peer.modify(a.qp, QPS_INIT, 1 | 16 | 32 | 8) == 5  # EIO
    assert a.peer.modify(a.qp, QPS_ERR, IBV_QP_STATE) == 0


def run_until_failure(a: Endpoint, b: Endpoint, writes: int) -> list[int]:
    """Posts ``writes`` WRs one at a time (reconnecting after a failure); their statuses."""
    seen = []
    for i in range(writes):
        assert a.post(WRITE, b, i, 64)["rc"] == 0
        (wc,) = a.poll_until(1)
        seen.append(wc["status"])
        if wc["status"] != WC_SUCCESS:
            a.connect(b)
    return seen


def test_chaos_draws_replay_from_the_seed(fabric, peers):
    a, b = connected_pair(peers(), peers())
    ctl = fabric.control(a.peer.pid)
    assert ctl.hello().seed == fabric.seed  # MC_VERBS_SEED reached the process
    ctl.chaos(seed=424242, fail=0.3, fail_status="rem_op_err")
    first = run_until_failure(a, b, 30)
    ctl.chaos(seed=424242, fail=0.3, fail_status="rem_op_err")
    assert run_until_failure(a, b, 30) == first
    assert WC_SUCCESS in first and 11 in first  # IBV_WC_REM_OP_ERR
    assert ctl.hello().chaos == "on"
    ctl.chaos_off()
    assert set(run_until_failure(a, b, 5)) == {WC_SUCCESS}
    assert "chaos on: seed=424242" in a.peer.stderr()


def test_a_crashed_process_leaves_no_held_state_behind(fabric, peers):
    pa, pb = peers(), peers()
    a, b = connected_pair(pa, pb)
    ctl = fabric.control(pa.pid)
    ctl.hold(count=0)
    assert a.post(WRITE, b, 1, 64, count=4)["rc"] == 0
    assert len(ctl.wait_held(4)) == 4
    pa.kill()
    with pytest.raises(ProcessGone, match="nothing it held survives|went away"):
        ctl.held()
    assert pa.pid not in fabric.control_sockets()
    assert not fabric.control_socket(pa.pid).exists()
    # the survivor's view: a's QP is gone with it, so b's WRs to it fail like a lost peer
    assert b.post(WRITE, a, 9, 64)["rc"] == 0
    assert statuses(b.poll_until(1)) == [(9, WC_RETRY_EXC_ERR)]
    assert fabric.control(pb.pid).counters().held == 0


def test_waits_are_bounded_and_bad_requests_say_what_was_wrong(fabric, peers):
    p = peers()
    p.open("mlx5_0")
    ctl = fabric.control(p.pid)
    started = time.monotonic()
    with pytest.raises(VerbsControlError, match="timeout: held=0, waited for 1"):
        ctl.wait("held", 1, timeout=0.2)
    assert time.monotonic() - started < 30
    with pytest.raises(VerbsControlError, match="no emulated device mlx9"):
        ctl.hold(device="mlx9")
    with pytest.raises(VerbsControlError, match="no held completion 999"):
        ctl.release([999])
    with pytest.raises(VerbsControlError, match="qp=4242 is not a QP of process"):
        ctl.fail_qp(4242)
    with pytest.raises(VerbsControlError, match="unknown command frobnicate"):
        ctl.request("frobnicate")
    with pytest.raises(VerbsControlError, match="status=bogus is not an ibv_wc_status name"):
        ctl.release(status="bogus")
    with pytest.raises(ValueError, match="stage='later'"):
        ctl.hold(stage="later")
    assert ctl.hello().pid == p.pid  # the connection survived the errors


def test_a_peer_rule_follows_the_replacement_qp(fabric, peers):
    pa, pb, pc = peers(), peers(), peers()
    ab, ba = connected_pair(pa, pb)
    ac, ca = connected_pair(pa, pc)
    ctl = fabric.control(pa.pid)
    ctl.hold(peer=pc.pid, count=0)
    assert ab.post(WRITE, ba, 1, 64)["rc"] == 0
    assert statuses(ab.poll_until(1)) == [(1, WC_SUCCESS)]  # to b: not held
    assert ac.post(WRITE, ca, 2, 64)["rc"] == 0
    ac2, ca2 = connected_pair(pa, pc)  # a replacement QP towards the same peer
    assert ac2.post(WRITE, ca2, 3, 64)["rc"] == 0
    assert sorted((h.wr_id, h.qp) for h in ctl.wait_held(2)) == [(2, ac.qpn), (3, ac2.qpn)]
    (rule,) = ctl.rules()
    assert (rule.peer, rule.matched) == (pc.pid, 2)


def test_a_socket_path_a_live_process_holds_is_not_taken_over(fabric, peers):
    shared = str(fabric.run_dir / "ctl" / "one.sock")
    first, second = peers({"MC_VERBS_CONTROL": shared}), peers({"MC_VERBS_CONTROL": shared})
    first.open("mlx5_0")
    second.open("mlx5_0")
    assert "in use by another live process" in second.stderr()
    assert VerbsControl(shared).hello().pid == first.pid
