"""The pyverbs backend: import-guarded here, exercised on hosts with an RNIC or soft-RoCE."""

import pytest

from reference_engine.rdma import pyverbs_backend
from reference_engine.rdma.verbs import Opcode, QPState, WcStatus, WorkRequest

OK, WHY = pyverbs_backend.available()


def test_backend_imports_without_pyverbs_and_explains_itself():
    if not OK:
        assert "python3-pyverbs" in WHY and "RNIC" in WHY
    else:
        assert WHY


@pytest.mark.skipif(not OK, reason=f"pyverbs not importable / no RDMA device: {WHY}")
def test_loopback_rdma_write_on_a_real_device():  # pragma: no cover - needs an RNIC
    ctx = pyverbs_backend.PyverbsContext(WHY)
    mem = pyverbs_backend.HostMemory()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(16)
    src, dst = mem.alloc(4096), mem.alloc(4096)
    mr_src, mr_dst = pd.reg_mr(src, 4096), pd.reg_mr(dst, 4096)
    a, b = ctx.create_qp(pd, cq, 16), ctx.create_qp(pd, cq, 16)
    for qp, peer in ((a, b), (b, a)):
        qp.to_init()
        qp.to_rtr(peer.qp_num, ctx.gid, ctx.lid)
        qp.to_rts()
    assert a.state == QPState.RTS
    mem.write(src, b"pyverbs!")
    a.post_send([WorkRequest(9, Opcode.RDMA_WRITE, src, 8, mr_src.lkey, dst, mr_dst.rkey)])
    wcs = []
    for _ in range(100000):
        wcs += cq.poll(4)
        if wcs:
            break
    assert wcs and wcs[0].wr_id == 9 and wcs[0].status == WcStatus.SUCCESS
    assert mem.read(dst, 8) == b"pyverbs!"
