"""The verbs interface: the part of libibverbs the RDMA worker pool depends on.

Values of the enums equal libibverbs' so that a pyverbs backend and the simulator speak the
same language. Implementations: ``sim.sim_verbs`` (a simulated fabric in one process) and
``pyverbs_backend`` (a real RNIC or soft-RoCE).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol


class QPState(enum.IntEnum):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class Opcode(enum.IntEnum):
    RDMA_WRITE = 0
    RDMA_READ = 4


class WcStatus(enum.IntEnum):
    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


LOCAL_WC_ERRORS = frozenset({
    WcStatus.LOC_LEN_ERR, WcStatus.LOC_QP_OP_ERR, WcStatus.LOC_PROT_ERR, WcStatus.MW_BIND_ERR,
    WcStatus.LOC_ACCESS_ERR, WcStatus.LOC_RDD_VIOL_ERR, WcStatus.LOC_EEC_OP_ERR,
    WcStatus.INV_EEC_STATE_ERR,
})
"""Errors Mooncake charges to the local context (GENERAL_ERR deliberately is not one)."""


class AsyncEventType(enum.IntEnum):
    CQ_ERR = 0
    QP_FATAL = 1
    QP_REQ_ERR = 2
    QP_ACCESS_ERR = 3
    COMM_EST = 4
    DEVICE_FATAL = 8
    PORT_ACTIVE = 9
    PORT_ERR = 10
    LID_CHANGE = 11
    GID_CHANGE = 18
    WQ_FATAL = 19


CONTEXT_FATAL_EVENTS = frozenset({
    AsyncEventType.DEVICE_FATAL, AsyncEventType.CQ_ERR, AsyncEventType.WQ_FATAL,
    AsyncEventType.PORT_ERR, AsyncEventType.LID_CHANGE,
})

ACCESS_LOCAL_WRITE = 1
ACCESS_REMOTE_WRITE = 2
ACCESS_REMOTE_READ = 4
ACCESS_ALL = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ


class WorkRequest:
    """One signalled RDMA READ/WRITE with a single SGE."""

    __slots__ = ("wr_id", "opcode", "local_addr", "length", "lkey", "remote_addr", "rkey")

    def __init__(self, wr_id: int, opcode: int, local_addr: int, length: int, lkey: int,
                 remote_addr: int, rkey: int):
        self.wr_id = wr_id
        self.opcode = opcode
        self.local_addr = local_addr
        self.length = length
        self.lkey = lkey
        self.remote_addr = remote_addr
        self.rkey = rkey


class WorkCompletion:
    """What poll_cq returns. ``seq`` is the simulator's post sequence (0 on real hardware)."""

    __slots__ = ("wr_id", "status", "opcode", "byte_len", "qp_num", "seq")

    def __init__(self, wr_id: int, status: int, opcode: int, byte_len: int, qp_num: int,
                 seq: int = 0):
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.seq = seq

    def __repr__(self) -> str:
        return (f"WorkCompletion(wr_id={self.wr_id:#x}, status={WcStatus(self.status).name}, "
                f"qp_num={self.qp_num}, seq={self.seq})")


class AsyncEvent:
    __slots__ = ("type", "qp_num", "port")

    def __init__(self, type: int, qp_num: int | None = None, port: int = 1):
        self.type = type
        self.qp_num = qp_num
        self.port = port

    def __repr__(self) -> str:
        return f"AsyncEvent({AsyncEventType(self.type).name}, qp_num={self.qp_num})"


class VerbsError(Exception):
    """A verbs call failed (the errno-returning calls of libibverbs)."""


class PostSendError(VerbsError):
    """``ibv_post_send`` failed; ``bad_index`` is the position of ``bad_wr`` in the chain.

    WRs before ``bad_index`` were posted and will complete; the rest were not posted.
    """

    def __init__(self, bad_index: int, errno: int, message: str = ""):
        self.bad_index = bad_index
        self.errno = errno
        super().__init__(message or f"post_send failed at wr {bad_index} (errno {errno})")


class MemoryRegion(Protocol):
    addr: int
    length: int
    lkey: int
    rkey: int


class ProtectionDomain(Protocol):
    def reg_mr(self, addr: int, length: int, access: int = ACCESS_ALL) -> MemoryRegion: ...


class CompletionQueue(Protocol):
    def poll(self, max_entries: int) -> list[WorkCompletion]: ...

    def pending(self) -> int:
        """Completions ready to poll (a hint for schedulers; real CQs may return 0)."""
        ...


class QueuePair(Protocol):
    qp_num: int
    state: QPState

    def to_init(self, port: int = 1, access: int = ACCESS_ALL) -> None: ...
    def to_rtr(self, dest_qp_num: int, dest_gid: str, dest_lid: int, mtu: int = 4096) -> None: ...
    def to_rts(self) -> None: ...
    def to_err(self) -> None: ...
    def post_send(self, wrs: Sequence[WorkRequest]) -> None:
        """Post a chain; raises ``PostSendError`` naming the first WR not posted."""
        ...

    def destroy(self) -> None: ...


class VerbsContext(Protocol):
    """An opened device (``ibv_context``)."""

    device_name: str
    gid: str
    lid: int

    def alloc_pd(self) -> ProtectionDomain: ...
    def create_cq(self, cqe: int) -> CompletionQueue: ...
    def create_qp(self, pd: ProtectionDomain, cq: CompletionQueue, max_send_wr: int,
                  max_sge: int = 1, max_inline: int = 0) -> QueuePair: ...
    def get_async_event(self) -> AsyncEvent | None:
        """Next pending async event or None (non-blocking); events need no separate ack."""
        ...

    def query_gid(self) -> str: ...
    def close(self) -> None: ...
