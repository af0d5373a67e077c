"""Run in a child process on an emulated device (tests/rdma/test_pyverbs_backend.py): the
reference engine's pyverbs backend posts an RDMA WRITE between two of its QPs, then one with a
wrong rkey, then reads a QP-fatal event the device's control socket raised, and prints what it
saw as one JSON line."""

from __future__ import annotations

import json
import os
import sys
import time

from pytest_mooncake.verbs import VerbsControl
from reference_engine.rdma import pyverbs_backend as pv
from reference_engine.rdma.verbs import Opcode, WorkRequest

DEADLINE = 30.0


def poll_one(cq) -> object:
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        wcs = cq.poll(4)
        if wcs:
            return wcs[0]
        time.sleep(0.001)
    raise SystemExit(f"no completion within {DEADLINE:g} s")


def main(device: str) -> None:
    ctx = pv.PyverbsContext(device)
    mem = pv.HostMemory()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(16)
    src, dst = mem.alloc(4096), mem.alloc(4096)
    mr_src, mr_dst = pd.reg_mr(src, 4096), pd.reg_mr(dst, 4096)
    a, b = ctx.create_qp(pd, cq, 16), ctx.create_qp(pd, cq, 16)
    for qp, peer in ((a, b), (b, a)):
        qp.to_init()
        qp.to_rtr(peer.qp_num, ctx.gid, ctx.lid)
        qp.to_rts()
    mem.write(src, b"pyverbs!")
    a.post_send([WorkRequest(9, Opcode.RDMA_WRITE, src, 8, mr_src.lkey, dst, mr_dst.rkey)])
    ok = poll_one(cq)
    landed = mem.read(dst, 8)
    a.post_send([WorkRequest(10, Opcode.RDMA_WRITE, src, 8, mr_src.lkey, dst,
                             mr_dst.rkey ^ 0x5a5a)])
    bad = poll_one(cq)
    a.post_send([WorkRequest(11, Opcode.RDMA_WRITE, src, 8, mr_src.lkey, dst, mr_dst.rkey)])
    flushed = poll_one(cq)
    sock = os.environ["MC_VERBS_CONTROL"].replace("%p", str(os.getpid()))
    with VerbsControl(sock) as ctl:
        ctl.inject("qp_fatal", qp=b.qp_num)
    end = time.monotonic() + DEADLINE
    event = ctx.get_async_event()
    while event is None and time.monotonic() < end:
        time.sleep(0.005)
        event = ctx.get_async_event()
    print(json.dumps({
        "device": ctx.device_name, "gid": ctx.gid,
        "ok": [ok.wr_id, int(ok.status)], "landed": landed.decode(errors="replace"),
        "bad_rkey": [bad.wr_id, int(bad.status)], "after_error": [flushed.wr_id,
                                                                  int(flushed.status)],
        "event": None if event is None else [int(event.type), event.qp_num], "qp_b": b.qp_num,
    }))
    ctx.close()


if __name__ == "__main__":
    main(sys.argv[1])
