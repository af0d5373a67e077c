"""The verbs interface over pyverbs (rdma-core's Python bindings) for a real RNIC or soft-RoCE.

Import-guarded: this module imports without pyverbs; ``available()`` says whether a device can
be opened and, if not, why. A ``bad_wr`` chain is posted one WR at a time, so the failing WR's
index is exact (the WRs before it were posted, as with ``ibv_post_send``'s ``bad_wr``).
"""

from __future__ import annotations

import ctypes
import os
import select
import threading
from collections import deque
from collections.abc import Sequence

from reference_engine.rdma.verbs import (
    ACCESS_ALL,
    AsyncEvent,
    Opcode,
    PostSendError,
    QPState,
    VerbsError,
    WorkCompletion,
    WorkRequest,
)

INSTALL_HINT = "apt-get install python3-pyverbs on a host with an RNIC (or soft-RoCE: rdma link add)"

try:  # pragma: no cover - exercised only where rdma-core's bindings exist
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context, get_device_list
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, SendWR

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # the usual case in CI
    _IMPORT_ERROR = str(exc)


def available(device: str | None = None) -> tuple[bool, str]:
    """(True, device name) when pyverbs imports and a device opens; else (False, why)."""
    if _IMPORT_ERROR is not None:
        return False, f"pyverbs not importable ({_IMPORT_ERROR}): {INSTALL_HINT}"
    try:  # pragma: no cover
        names = [d.name.decode() if isinstance(d.name, bytes) else d.name
                 for d in get_device_list()]
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable device"
        return False, f"cannot list RDMA devices ({exc}): {INSTALL_HINT}"
    if not names:
        return False, f"no RDMA device: {INSTALL_HINT}"
    if device is not None and device not in names:
        return False, f"RDMA device {device!r} not found (have {', '.join(names)})"
    return True, device or names[0]


class HostMemory:
    """Page-aligned host buffers for registration (what the simulator's SimMemory is)."""

    def __init__(self) -> None:
        self._keep: list = []

    def alloc(self, length: int) -> int:
        buf = (ctypes.c_char * (length + 4096))()
        self._keep.append(buf)
        addr = ctypes.addressof(buf)
        return (addr + 4095) & ~4095

    @staticmethod
    def read(addr: int, length: int) -> bytes:
        return ctypes.string_at(addr, length)

    @staticmethod
    def write(addr: int, data: bytes) -> None:
        ctypes.memmove(addr, data, len(data))


class _MR:
    def __init__(self, mr, addr: int, length: int):
        self._mr = mr
        self.addr = addr
        self.length = length
        self.lkey = mr.lkey
        self.rkey = mr.rkey


class _PD:  # pragma: no cover
    def __init__(self, ctx: PyverbsContext):
        self.ctx = ctx
        self.pd = PD(ctx.ctx)

    def reg_mr(self, addr: int, length: int, access: int = ACCESS_ALL) -> _MR:
        flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        try:
            return _MR(MR(self.pd, length, flags, address=addr), addr, length)
        except PyverbsError as exc:
            raise VerbsError(f"reg_mr {addr:#x}+{length}: {exc}") from exc


class _CQ:  # pragma: no cover
    def __init__(self, ctx: PyverbsContext, cqe: int):
        self.cq = CQ(ctx.ctx, cqe, None, None, 0)

    def poll(self, max_entries: int) -> list[WorkCompletion]:
        n, wcs = self.cq.poll(max_entries)
        return [WorkCompletion(w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num)
                for w in wcs[:n]]

    def pending(self) -> int:
        return 1


class _QP:  # pragma: no cover
    def __init__(self, ctx: PyverbsContext, pd: _PD, cq: _CQ, max_send_wr: int, max_sge: int,
                 max_inline: int):
        self.ctx = ctx
        cap = QPCap(max_send_wr=max_send_wr, max_recv_wr=max_send_wr, max_send_sge=max_sge,
                    max_recv_sge=max_sge, max_inline_data=max_inline)
        self.qp = QP(pd.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq.cq, rcq=cq.cq, cap=cap,
                                       sq_sig_all=0))
        self.qp_num = self.qp.qp_num
        self.state = QPState.RESET

    def _modify(self, attr, mask: int, state: QPState) -> None:
        try:
            self.qp.modify(attr, mask)
        except PyverbsError as exc:
            raise VerbsError(f"qp {self.qp_num} -> {state.name}: {exc}") from exc
        self.state = state

    def to_init(self, port: int = 1, access: int = ACCESS_ALL) -> None:
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=self.ctx.port)
        attr.pkey_index = 0
        attr.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                                | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)
        self._modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                     | e.IBV_QP_ACCESS_FLAGS, QPState.INIT)

    def to_rtr(self, dest_qp_num: int, dest_gid: str, dest_lid: int = 0, mtu: int = 4096) -> None:
        from pyverbs.addr import GID
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.path_mtu = {512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024, 2048: e.IBV_MTU_2048}.get(
            mtu, e.IBV_MTU_4096)
        attr.dest_qp_num = dest_qp_num
        attr.rq_psn = 0
        attr.max_dest_rd_atomic = 16
        attr.min_rnr_timer = 12
        gr = GlobalRoute(dgid=GID(dest_gid), sgid_index=self.ctx.gid_index, hop_limit=16)
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=self.ctx.port, dlid=dest_lid)
        self._modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                     | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER,
                     QPState.RTR)

    def to_rts(self) -> None:
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.sq_psn = 0
        attr.max_rd_atomic = 16
        self._modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                     | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC,
                     QPState.RTS)

    def to_err(self) -> None:
        self._modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE, QPState.ERR)

    def post_send(self, wrs: Sequence[WorkRequest]) -> None:
        for i, wr in enumerate(wrs):
            op = e.IBV_WR_RDMA_WRITE if wr.opcode == Opcode.RDMA_WRITE else e.IBV_WR_RDMA_READ
            swr = SendWR(wr_id=wr.wr_id, opcode=op, num_sge=1,
                         sg=[SGE(wr.local_addr, wr.length, wr.lkey)],
                         send_flags=e.IBV_SEND_SIGNALED)
            swr.set_wr_rdma(wr.rkey, wr.remote_addr)
            try:
                self.qp.post_send(swr)
            except PyverbsError as exc:
                raise PostSendError(i, getattr(exc, "error_code", 0) or 0, str(exc)) from exc

    def destroy(self) -> None:
        self.qp.close()


def _open_fds() -> set[int]:
    """This process's open fds (not the one listing them, which is closed by then)."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        out.add(int(name))
    return out


def _async_fd(new: set[int], cmd_fd: int) -> int:
    """The context's async event fd among the fds opening it added: rdma-core's is an
    ``anon_inode:[infinibandevent]``, an emulated device's the read end of a pipe."""
    def kind(fd: int) -> tuple[str, int]:
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
            with open(f"/proc/self/fdinfo/{fd}") as info:
                flags = next((int(ln.split()[1], 8) for ln in info if ln.startswith("flags:")), 0)
        except OSError:
            return "", -1
        return link, flags & os.O_ACCMODE

    found = {fd: kind(fd) for fd in sorted(new - {cmd_fd})}
    for fd, (link, _) in found.items():
        if "infinibandevent" in link:
            return fd
    for fd, (link, mode) in found.items():
        if link.startswith("pipe:") and mode == os.O_RDONLY:
            return fd
    raise VerbsError(f"cannot find the device's async event fd among the fds its open added "
                     f"({found or 'none'}; cmd_fd {cmd_fd})")


class PyverbsContext:  # pragma: no cover
    """An opened RNIC. Async events are read by a daemon thread into a queue."""

    def __init__(self, device_name: str, port: int = 1, gid_index: int = 0):
        ok, why = available(device_name)
        if not ok:
            raise VerbsError(why)
        before = _open_fds()
        self.ctx = Context(name=device_name)
        # pyverbs' get_async_event blocks inside C with the GIL held: a thread calling it
        # freezes every other thread. The async fd (the one the open added besides cmd_fd)
        # is watched with select() instead, and read only when an event is there.
        self._async_fd = _async_fd(_open_fds() - before, self.ctx.cmd_fd)
        self.device_name = device_name
        self.port = port
        self.gid_index = gid_index
        self.lid = self.ctx.query_port(port).lid
        self.gid = self.query_gid()
        self.events: deque[AsyncEvent] = deque()
        self._closed = threading.Event()
        threading.Thread(target=self._read_events, name=f"{device_name}.async",
                         daemon=True).start()

    def _read_events(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._async_fd], [], [], 0.2)
                if not ready or self._closed.is_set():
                    continue
                ev = self.ctx.get_async_event()
            except Exception:  # noqa: BLE001 - context closed
                return
            qp = getattr(getattr(ev, "element", None), "qp_num", None)
            self.events.append(AsyncEvent(int(ev.event_type), qp))
            ev.ack()

    def alloc_pd(self) -> _PD:
        return _PD(self)

    def create_cq(self, cqe: int) -> _CQ:
        return _CQ(self, cqe)

    def create_qp(self, pd: _PD, cq: _CQ, max_send_wr: int, max_sge: int = 1,
                  max_inline: int = 0) -> _QP:
        return _QP(self, pd, cq, max_send_wr, max_sge, max_inline)

    def get_async_event(self) -> AsyncEvent | None:
        try:
            return self.events.popleft()
        except IndexError:
            return None

    def pending_events(self) -> int:
        return len(self.events)

    def query_gid(self) -> str:
        return str(self.ctx.query_gid(self.port, self.gid_index))

    def close(self) -> None:
        self._closed.set()
        self.ctx.close()
