"""Simulated verbs: MR checks, QP state machine, bad_wr chains, flush on ERR, async events."""

import pytest

from reference_engine.rdma.sim.sim_verbs import DROP, ERROR, FAIL_POST, HOLD, Fault, SimFabric
from reference_engine.rdma.verbs import (
    ACCESS_LOCAL_WRITE,
    AsyncEventType,
    Opcode,
    PostSendError,
    QPState,
    VerbsError,
    WcStatus,
    WorkRequest,
)


def _pair(auto=True):
    fabric = SimFabric(auto_deliver=auto)
    a = fabric.add_node("A", [("mlx5_0", "fe80::a0")])
    b = fabric.add_node("B", [("mlx5_0", "fe80::b0")])
    ca, cb = a.open("mlx5_0"), b.open("mlx5_0")
    pa, pb = ca.alloc_pd(), cb.alloc_pd()
    qa = ca.create_qp(pa, ca.create_cq(64), 16)
    qb = cb.create_qp(pb, cb.create_cq(64), 16)
    for q, peer, gid in ((qa, qb, "fe80::b0"), (qb, qa, "fe80::a0")):
        q.to_init()
        q.to_rtr(peer.qp_num, gid, 0)
        q.to_rts()
    src = a.memory.alloc(4096)
    dst = b.memory.alloc(4096)
    mra = pa.reg_mr(src, 4096)
    mrb = pb.reg_mr(dst, 4096)
    return fabric, a, b, qa, qb, mra, mrb


def _write(mra, mrb, wr_id, off=0, n=16, rkey=None):
    return WorkRequest(wr_id, Opcode.RDMA_WRITE, mra.addr + off, n, mra.lkey, mrb.addr + off,
                       mrb.rkey if rkey is None else rkey)


def test_write_lands_in_remote_registered_memory():
    fabric, a, b, qa, _, mra, mrb = _pair()
    a.memory.write(mra.addr, b"hello, rdma world")
    qa.post_send([_write(mra, mrb, 7, n=17)])
    [wc] = qa.cq.poll(8)
    assert (wc.wr_id, wc.status, wc.byte_len) == (7, WcStatus.SUCCESS, 17)
    assert b.memory.read(mrb.addr, 17) == b"hello, rdma world"


def test_read_pulls_remote_memory():
    fabric, a, b, qa, _, mra, mrb = _pair()
    b.memory.write(mrb.addr + 100, b"remote")
    qa.post_send([WorkRequest(1, Opcode.RDMA_READ, mra.addr, 6, mra.lkey, mrb.addr + 100,
                              mrb.rkey)])
    assert qa.cq.poll(1)[0].status == WcStatus.SUCCESS
    assert a.memory.read(mra.addr, 6) == b"remote"


def test_bad_rkey_and_out_of_bounds_are_remote_access_errors_and_flush_the_rest():
    fabric, a, b, qa, qb, mra, mrb = _pair(auto=False)
    qa.post_send([_write(mra, mrb, 1, rkey=mrb.rkey + 99), _write(mra, mrb, 2)])
    fabric.deliver_all()
    wcs = qa.cq.poll(8)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.REM_ACCESS_ERR),
                                                  (2, WcStatus.WR_FLUSH_ERR)]
    assert qa.state == QPState.ERR and qb.state == QPState.ERR
    assert b.memory.read(mrb.addr, 16) == bytes(16)


def test_out_of_bounds_write_is_rejected():
    fabric, a, b, qa, _, mra, mrb = _pair()
    qa.post_send([_write(mra, mrb, 1, off=4090, n=16)])
    assert qa.cq.poll(1)[0].status in (WcStatus.LOC_PROT_ERR, WcStatus.REM_ACCESS_ERR)


def test_remote_write_needs_remote_write_access():
    fabric, a, b, qa, qb, mra, _ = _pair()
    dst = b.memory.alloc(64)
    ro = qb.pd.reg_mr(dst, 64, access=ACCESS_LOCAL_WRITE)
    qa.post_send([_write(mra, ro, 1)])
    assert qa.cq.poll(1)[0].status == WcStatus.REM_ACCESS_ERR


def test_qp_state_machine_rejects_skipped_transitions_and_posts_before_rts():
    fabric = SimFabric()
    node = fabric.add_node("A", [("d", "g")])
    ctx = node.open("d")
    pd = ctx.alloc_pd()
    qp = ctx.create_qp(pd, ctx.create_cq(4), 4)
    with pytest.raises(VerbsError, match="RESET"):
        qp.to_rtr(1, "g")
    qp.to_init()
    with pytest.raises(PostSendError) as exc:
        qp.post_send([WorkRequest(1, Opcode.RDMA_WRITE, 0, 1, 0, 0, 0)])
    assert exc.value.bad_index == 0


def test_bad_wr_chain_posts_only_the_prefix():
    fabric, a, b, qa, _, mra, mrb = _pair()
    fabric.inject(Fault(FAIL_POST, predicate=lambda wr: wr.wr_id == 3))
    chain = [_write(mra, mrb, i, off=16 * i) for i in range(1, 5)]
    with pytest.raises(PostSendError) as exc:
        qa.post_send(chain)
    assert exc.value.bad_index == 2
    assert sorted(w.wr_id for w in qa.cq.poll(8)) == [1, 2]


def test_hold_release_and_drop():
    fabric, a, b, qa, _, mra, mrb = _pair()
    fabric.inject(Fault(HOLD, local_addr=mra.addr, tag="t"))
    fabric.inject(Fault(DROP, local_addr=mra.addr + 16))
    qa.post_send([_write(mra, mrb, 1), _write(mra, mrb, 2, off=16), _write(mra, mrb, 3, off=32)])
    assert [w.wr_id for w in qa.cq.poll(8)] == [3]
    assert fabric.release("t") == 1
    assert [w.wr_id for w in qa.cq.poll(8)] == [1]
    assert qa.cq.poll(8) == []


def test_injected_error_status():
    fabric, a, b, qa, _, mra, mrb = _pair()
    fabric.inject(Fault(ERROR, qp_num=qa.qp_num, status=WcStatus.RETRY_EXC_ERR))
    qa.post_send([_write(mra, mrb, 1)])
    assert qa.cq.poll(1)[0].status == WcStatus.RETRY_EXC_ERR
    assert qa.state == QPState.ERR


def test_qp_fatal_flushes_and_raises_async_event():
    fabric, a, b, qa, _, mra, mrb = _pair(auto=False)
    qa.post_send([_write(mra, mrb, 1)])
    fabric.raise_qp_fatal(qa)
    assert qa.cq.poll(4)[0].status == WcStatus.WR_FLUSH_ERR
    ev = qa.ctx.get_async_event()
    assert ev.type == AsyncEventType.QP_FATAL and ev.qp_num == qa.qp_num
    assert qa.ctx.get_async_event() is None


def test_peer_restart_makes_old_qps_fail_with_retry_exceeded():
    fabric, a, b, qa, _, mra, mrb = _pair()
    b.shutdown()
    b2 = fabric.add_node("B", [("mlx5_0", "fe80::b0")])
    assert b2.memory.alloc(4096, addr=mrb.addr) == mrb.addr
    pd2 = b2.open("mlx5_0").alloc_pd()
    assert pd2.reg_mr(mrb.addr, 4096).rkey == mrb.rkey
    qa.post_send([_write(mra, mrb, 1)])
    assert qa.cq.poll(1)[0].status == WcStatus.RETRY_EXC_ERR


def test_destroyed_qp_completes_nothing_but_queued_cqes_stay():
    fabric, a, b, qa, _, mra, mrb = _pair(auto=False)
    qa.post_send([_write(mra, mrb, 1), _write(mra, mrb, 2, off=16)])
    fabric.deliver_one()
    qa.destroy()
    assert fabric.deliver_all() == 0
    assert [w.wr_id for w in qa.cq.poll(8)] == [1]


def test_delay_completes_after_later_posts_in_free_running_mode():
    from reference_engine.rdma.sim.sim_verbs import DELAY
    fabric, a, b, qa, _, mra, mrb = _pair()
    fabric.inject(Fault(DELAY, local_addr=mra.addr, delay=2))
    qa.post_send([_write(mra, mrb, 1)])
    qa.post_send([_write(mra, mrb, 2, off=16)])
    assert [w.wr_id for w in qa.cq.poll(8)] == [2]
    qa.post_send([_write(mra, mrb, 3, off=32), _write(mra, mrb, 4, off=48)])
    assert sorted(w.wr_id for w in qa.cq.poll(8)) == [1, 3, 4]


def test_delay_reorders_delivery_in_controlled_mode():
    from reference_engine.rdma.sim.sim_verbs import DELAY
    fabric, a, b, qa, _, mra, mrb = _pair(auto=False)
    fabric.inject(Fault(DELAY, local_addr=mra.addr, delay=1))
    qa.post_send([_write(mra, mrb, 1), _write(mra, mrb, 2, off=16)])
    fabric.deliver_all()
    assert [w.wr_id for w in qa.cq.poll(8)] == [2, 1]
