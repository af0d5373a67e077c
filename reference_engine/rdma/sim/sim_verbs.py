"""Simulated verbs: several nodes and NICs in one process over a simulated RC fabric.

Remote writes land in the target node's registered memory; MR bounds, access and key checks,
the QP state machine, ``bad_wr`` chains, flush on ERR and async events behave as on an RNIC
(the subset the worker pool depends on). Faults are injected with ``Fault`` rules.

Delivery: with ``auto_deliver`` (free-running) a posted WR executes inside ``post_send``; without
it (controlled) WRs wait in the fabric until ``deliver_one`` runs them, so a scheduler can choose
when each completion arrives. Held WRs wait until ``release(tag)``.
"""

from __future__ import annotations

import bisect
import errno
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference_engine.rdma.verbs import (
    ACCESS_ALL,
    ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
    AsyncEvent,
    AsyncEventType,
    Opcode,
    PostSendError,
    QPState,
    VerbsError,
    WcStatus,
    WorkCompletion,
    WorkRequest,
)

_SUCCESS = WcStatus.SUCCESS
_FLUSH = WcStatus.WR_FLUSH_ERR
_ERR = QPState.ERR
_RTS = QPState.RTS
_RTR = QPState.RTR
_WRITE = Opcode.RDMA_WRITE

FAIL_POST = "fail_post"
ERROR = "error"
DROP = "drop"
HOLD = "hold"
DELAY = "delay"


@dataclass
class Fault:
    """A fault rule. Matches WRs by QP number, local address, opcode or a predicate.

    ``action``: ``fail_post`` (post_send returns this WR as bad_wr), ``error`` (complete with
    ``status``), ``drop`` (never completes), ``hold`` (completes when ``release(tag)`` is
    called), ``delay`` (completes after ``delay`` other deliveries; free-running, after ``delay``
    later posts or looks at an empty CQ, so the last WRs posted complete too; unlike real RC
    hardware this may reorder completions within one QP). ``times`` = how many WRs it applies
    to (None = unlimited).
    """

    action: str
    qp_num: int | None = None
    local_addr: int | None = None
    opcode: int | None = None
    predicate: Callable[[WorkRequest], bool] | None = None
    status: int = WcStatus.REM_ACCESS_ERR
    tag: str = "held"
    delay: int = 1
    times: int | None = 1
    hits: int = 0

    def matches(self, qp_num: int, wr: WorkRequest) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.qp_num is not None and self.qp_num != qp_num:
            return False
        if self.local_addr is not None and self.local_addr != wr.local_addr:
            return False
        if self.opcode is not None and self.opcode != wr.opcode:
            return False
        return self.predicate is None or bool(self.predicate(wr))


class _Pending:
    __slots__ = ("qp", "wr", "seq", "done", "status", "delay")

    def __init__(self, qp: SimQP, wr: WorkRequest, seq: int):
        self.qp = qp
        self.wr = wr
        self.seq = seq
        self.done = False
        self.status = _SUCCESS
        self.delay = 0


class SimMemory:
    """A node's address space: disjoint regions of bytes at chosen virtual addresses."""

    def __init__(self, base: int = 0x7F0000000000):
        self._starts: list[int] = []
        self._regions: list[tuple[int, bytearray]] = []
        self._next = base

    def alloc(self, length: int, addr: int | None = None) -> int:
        if length <= 0:
            raise ValueError(f"length must be positive, got {length}")
        if addr is None:
            addr = self._next
        if self._find(addr, 1) is not None or self._find(addr + length - 1, 1) is not None:
            raise ValueError(f"region {addr:#x}+{length} overlaps an existing region")
        i = bisect.bisect(self._starts, addr)
        self._starts.insert(i, addr)
        self._regions.insert(i, (addr, bytearray(length)))
        self._next = max(self._next, addr + length + 0x1000)
        return addr

    def _find(self, addr: int, length: int) -> tuple[bytearray, int] | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        start, buf = self._regions[i]
        off = addr - start
        if off + length > len(buf):
            return None
        return buf, off

    def view(self, addr: int, length: int) -> memoryview:
        found = self._find(addr, length)
        if found is None:
            raise ValueError(f"address range {addr:#x}+{length} is not mapped")
        buf, off = found
        return memoryview(buf)[off:off + length]

    def read(self, addr: int, length: int) -> bytes:
        return bytes(self.view(addr, length))

    def write(self, addr: int, data: bytes) -> None:
        self.view(addr, len(data))[:] = data


class SimMR:
    __slots__ = ("pd", "addr", "length", "lkey", "rkey", "access", "view")

    def __init__(self, pd: SimPD, addr: int, length: int, key: int, access: int,
                 view: memoryview):
        self.pd = pd
        self.addr = addr
        self.length = length
        self.lkey = key
        self.rkey = key
        self.access = access
        self.view = view
        """The registered bytes (a region is contiguous node memory, looked up once)."""

    def covers(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length


class SimPD:
    def __init__(self, ctx: SimContext):
        self.ctx = ctx

    def reg_mr(self, addr: int, length: int, access: int = ACCESS_ALL) -> SimMR:
        ctx = self.ctx
        if ctx.closed:
            raise VerbsError(f"{ctx.device_name}: context closed")
        view = ctx.node.memory.view(addr, length)
        ctx.mr_seq += 1
        mr = SimMR(self, addr, length, (ctx.ordinal << 16) | ctx.mr_seq, access, view)
        ctx.mrs[mr.lkey] = mr
        return mr


class SimCQ:
    def __init__(self, ctx: SimContext, cqe: int):
        self.ctx = ctx
        self.cqe = cqe
        self.entries: deque[WorkCompletion] = deque()
        self.pollers: set[str] = set()
        """Free-running: the threads that polled this CQ or looked at it empty (``pending``),
        as a NIC sees the threads calling ibv_poll_cq on it; controlled runs share one thread
        and note nothing."""
        self._note_pollers = ctx.fabric.auto_deliver

    def poll(self, max_entries: int) -> list[WorkCompletion]:
        entries = self.entries
        if self._note_pollers:
            self.pollers.add(threading.current_thread().name)
        if not entries:
            return []
        with self.ctx.fabric.lock:
            n = min(max_entries, len(entries))
            return [entries.popleft() for _ in range(n)]

    def pending(self) -> int:
        entries = self.entries
        if self._note_pollers:
            self.pollers.add(threading.current_thread().name)
        if not entries:
            fabric = self.ctx.fabric
            if fabric.in_flight and fabric.auto_deliver:
                with fabric.lock:  # free-running: a look at an empty CQ lets delayed WRs come due
                    fabric._tick_delayed(1)
        return len(entries)


class SimQP:
    def __init__(self, ctx: SimContext, pd: SimPD, cq: SimCQ, qp_num: int, max_send_wr: int):
        self.ctx = ctx
        self.pd = pd
        self.cq = cq
        self.qp_num = qp_num
        self.max_send_wr = max_send_wr
        self.state = QPState.RESET
        self.dest_qp_num = -1
        self.dest_gid = ""
        self.destroyed = False
        self.pending: set[_Pending] = set()
        self.posted = 0
        self.app_err = False
        """The engine moved it to ERR itself (``to_err``), not a fault of the fabric."""
        self.posted_after_retire = 0

    def _require(self, *states: QPState) -> None:
        if self.destroyed:
            raise VerbsError(f"qp {self.qp_num}: destroyed")
        if self.state not in states:
            raise VerbsError(f"qp {self.qp_num}: invalid transition from {self.state.name}")

    def to_init(self, port: int = 1, access: int = ACCESS_ALL) -> None:
        self._require(QPState.RESET)
        self.state = QPState.INIT

    def to_rtr(self, dest_qp_num: int, dest_gid: str, dest_lid: int = 0, mtu: int = 4096) -> None:
        self._require(QPState.INIT)
        self.dest_qp_num = dest_qp_num
        self.dest_gid = dest_gid
        self.state = QPState.RTR

    def to_rts(self) -> None:
        self._require(QPState.RTR)
        self.state = QPState.RTS

    def to_err(self) -> None:
        if self.destroyed:
            raise VerbsError(f"qp {self.qp_num}: destroyed")
        with self.ctx.fabric.lock:
            if self.state != QPState.ERR:
                self.app_err = True
            self.ctx.fabric._to_err(self)

    def to_reset(self) -> None:
        self._require(QPState.ERR, QPState.INIT, QPState.RTR, QPState.RTS)
        self.state = QPState.RESET

    def post_send(self, wrs: Sequence[WorkRequest]) -> None:
        self.ctx.fabric.post(self, wrs)

    def destroy(self) -> None:
        fabric = self.ctx.fabric
        with fabric.lock:
            if self.destroyed:
                return
            self.destroyed = True
            self.outstanding_at_destroy = len(self.pending)
            for rec in self.pending:
                rec.done = True
                fabric.deliverable -= 1
            self.pending.clear()
            fabric.qps.pop(self.qp_num, None)
            fabric.destroyed.append(self)
            self.ctx.qps.discard(self)


class SimContext:
    """An opened simulated NIC."""

    def __init__(self, node: SimNode, device_name: str, gid: str, lid: int, ordinal: int):
        self.node = node
        self.fabric = node.fabric
        self.device_name = device_name
        self.gid = gid
        self.lid = lid
        self.ordinal = ordinal
        self.mrs: dict[int, SimMR] = {}
        self.mr_seq = 0
        self.qps: set[SimQP] = set()
        self.events: deque[AsyncEvent] = deque()
        self.dead = False
        self.closed = False

    def alloc_pd(self) -> SimPD:
        return SimPD(self)

    def create_cq(self, cqe: int) -> SimCQ:
        return SimCQ(self, cqe)

    def create_qp(self, pd: SimPD, cq: SimCQ, max_send_wr: int, max_sge: int = 1,
                  max_inline: int = 0) -> SimQP:
        if self.closed or self.dead:
            raise VerbsError(f"{self.device_name}: device unusable")
        fabric = self.fabric
        with fabric.lock:
            fabric.next_qp_num += 1
            qp = SimQP(self, pd, cq, fabric.next_qp_num, max_send_wr)
            fabric.qps[qp.qp_num] = qp
            fabric.qp_owner[qp.qp_num] = self.node.name
            fabric.qp_nic[qp.qp_num] = self.device_name
            self.qps.add(qp)
        return qp

    def get_async_event(self) -> AsyncEvent | None:
        try:
            return self.events.popleft()
        except IndexError:
            return None

    def pending_events(self) -> int:
        return len(self.events)

    def query_gid(self) -> str:
        return self.gid

    def close(self) -> None:
        for qp in list(self.qps):
            qp.destroy()
        self.mrs.clear()
        self.closed = True


class SimNode:
    """A host with NICs and memory. ``nics`` = [(name, gid)]; restart = a new SimNode."""

    def __init__(self, fabric: SimFabric, name: str, nics: Sequence[tuple[str, str]]):
        self.fabric = fabric
        self.name = name
        self.memory = SimMemory()
        self.contexts = {
            nic: SimContext(self, nic, gid, lid=i + 1, ordinal=i + 1)
            for i, (nic, gid) in enumerate(nics)
        }
        self.alive = True

    def open(self, device_name: str) -> SimContext:
        try:
            return self.contexts[device_name]
        except KeyError:
            raise VerbsError(f"node {self.name}: no device {device_name!r}") from None

    def shutdown(self) -> None:
        """The process died: its QPs vanish (peers see retry-exceeded), its MRs go away."""
        for ctx in self.contexts.values():
            ctx.close()
        self.alive = False


class SimFabric:
    """The wire between simulated nodes; owns in-flight WRs, fault rules and the post sequence."""

    def __init__(self, auto_deliver: bool = True):
        self.auto_deliver = auto_deliver
        self.lock = threading.Lock()
        self.nodes: dict[str, SimNode] = {}
        self.qps: dict[int, SimQP] = {}
        self.next_qp_num = 0x100
        self.seq = 0
        self.in_flight: deque[_Pending] = deque()
        self.deliverable = 0
        self.held: dict[str, list[_Pending]] = {}
        self.faults: list[Fault] = []
        self.qp_owner: dict[int, str] = {}
        """QP number -> the node that created it (also after it was destroyed)."""
        self.qp_nic: dict[int, str] = {}
        """QP number -> the NIC it was created on."""
        self.destroyed: list[SimQP] = []
        self.observer = None
        """Gets ``on_wr_posted(seq, qp_num, wr_id)``; used by the invariant checker."""

    # ---------------------------------------------------------------- topology
    def add_node(self, name: str, nics: Sequence[tuple[str, str]]) -> SimNode:
        old = self.nodes.get(name)
        if old is not None and old.alive:
            raise ValueError(f"node {name!r} is running; shut it down before restarting it")
        node = SimNode(self, name, nics)
        self.nodes[name] = node
        return node

    # ---------------------------------------------------------------- faults
    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def disarm(self) -> int:
        """Remove every injected fault (also those yet to fire); how many. Call it before a
        final ``release``: a HOLD still armed would hold a WR posted after the release (a
        retry, on a loaded machine) for ever."""
        with self.lock:
            count = len(self.faults)
            self.faults.clear()
        return count

    def _match(self, kinds: tuple[str, ...], qp: SimQP, wr: WorkRequest) -> Fault | None:
        for f in self.faults:
            if f.action in kinds and f.matches(qp.qp_num, wr):
                f.hits += 1
                return f
        return None

    def release(self, tag: str = "held", status: int | None = None) -> int:
        """Let held WRs complete (in post order), with ``status`` instead of executing when
        one is given. Returns how many were released."""
        with self.lock:
            recs = self.held.pop(tag, [])
            for rec in recs:
                if status is not None:
                    rec.status = status
                self._enqueue(rec)
        return len(recs)

    def held_count(self, tag: str | None = None) -> int:
        if tag is None:
            return sum(len(v) for v in self.held.values())
        return len(self.held.get(tag, ()))

    def raise_qp_fatal(self, qp: SimQP) -> None:
        with self.lock:
            self._to_err(qp)
            qp.ctx.events.append(AsyncEvent(AsyncEventType.QP_FATAL, qp.qp_num))

    def raise_qp_fatal_num(self, ctx: SimContext, qp_num: int) -> None:
        """QP-fatal for a QP number, also one already destroyed (an event read late)."""
        with self.lock:
            qp = self.qps.get(qp_num)
            if qp is not None:
                self._to_err(qp)
            ctx.events.append(AsyncEvent(AsyncEventType.QP_FATAL, qp_num))

    def raise_device_fatal(self, ctx: SimContext) -> None:
        with self.lock:
            ctx.dead = True
            for qp in list(ctx.qps):
                self._to_err(qp)
            ctx.events.append(AsyncEvent(AsyncEventType.DEVICE_FATAL))

    def change_gid(self, ctx: SimContext, gid: str) -> None:
        with self.lock:
            ctx.gid = gid
            ctx.events.append(AsyncEvent(AsyncEventType.GID_CHANGE))

    def raise_event(self, ctx: SimContext, type: int, qp_num: int | None = None) -> None:
        with self.lock:
            ctx.events.append(AsyncEvent(type, qp_num))

    # ---------------------------------------------------------------- data path
    def post(self, qp: SimQP, wrs: Sequence[WorkRequest]) -> None:
        with self.lock:
            if qp.destroyed or qp.ctx.dead:
                raise PostSendError(0, errno.EIO, f"qp {qp.qp_num}: device or QP gone")
            if qp.state != _RTS and qp.state != _ERR:
                raise PostSendError(0, errno.EINVAL, f"qp {qp.qp_num}: post in {qp.state.name}")
            faults = self.faults
            observer = self.observer
            qp_num = qp.qp_num
            for i, wr in enumerate(wrs):
                fault = self._match((FAIL_POST,), qp, wr) if faults else None
                if fault is not None:
                    raise PostSendError(i, errno.ENOMEM, f"qp {qp.qp_num}: injected bad_wr at {i}")
                seq = self.seq = self.seq + 1
                qp.posted += 1
                if qp.state == _ERR and qp.app_err:
                    qp.posted_after_retire += 1
                rec = _Pending(qp, wr, seq)
                if observer is not None:
                    observer.on_wr_posted(seq, qp_num, wr.wr_id)
                if qp.state == _ERR:
                    self._complete(rec, _FLUSH)
                    continue
                fault = self._match((ERROR, DROP, HOLD, DELAY), qp, wr) if faults else None
                if fault is None:
                    self._enqueue(rec)
                elif fault.action == ERROR:
                    rec.status = fault.status
                    self._enqueue(rec)
                elif fault.action == HOLD:
                    self.held.setdefault(fault.tag, []).append(rec)
                elif fault.action == DELAY:
                    rec.delay = fault.delay
                    self._enqueue(rec)
            if self.auto_deliver and self.in_flight:
                self._tick_delayed(len(wrs))

    def _tick_delayed(self, posted: int) -> None:
        """Free-running: a delayed WR completes after ``delay`` later posts or empty-CQ looks."""
        due = []
        for rec in self.in_flight:
            if not rec.done:
                rec.delay -= posted
                if rec.delay < 0:
                    due.append(rec)
        for rec in due:
            self.in_flight.remove(rec)
            rec.qp.pending.discard(rec)
            self.deliverable -= 1
            rec.delay = 0
            self._execute(rec)

    def _enqueue(self, rec: _Pending) -> None:
        qp = rec.qp
        if qp.destroyed:
            return
        if qp.state == _ERR:
            self._complete(rec, _FLUSH)
        elif self.auto_deliver and not rec.delay:
            self._execute(rec)
        else:
            qp.pending.add(rec)
            self.in_flight.append(rec)
            self.deliverable += 1

    def deliver_one(self) -> bool:
        """Execute the oldest deliverable in-flight WR. Returns False when none is left."""
        with self.lock:
            q = self.in_flight
            while q:
                rec = q.popleft()
                if rec.done:
                    continue
                if rec.delay and self.deliverable > 1:
                    rec.delay -= 1
                    q.append(rec)
                    continue
                rec.qp.pending.discard(rec)
                self.deliverable -= 1
                self._execute(rec)
                return True
            return False

    def deliver_all(self) -> int:
        n = 0
        while self.deliver_one():
            n += 1
        return n

    def _execute(self, rec: _Pending) -> None:
        qp = rec.qp
        if qp.destroyed:
            return
        if qp.state == _ERR:
            self._complete(rec, _FLUSH)
            return
        if rec.status != _SUCCESS:
            self._fail(rec, rec.status)
            return
        wr = rec.wr
        length = wr.length
        local = qp.ctx.mrs.get(wr.lkey)
        lo = wr.local_addr - local.addr if local is not None else -1
        if local is None or local.pd is not qp.pd or lo < 0 or lo + length > local.length:
            self._fail(rec, WcStatus.LOC_PROT_ERR)
            return
        peer = self.qps.get(qp.dest_qp_num)
        if (peer is None or peer.ctx.gid != qp.dest_gid or peer.dest_qp_num != qp.qp_num
                or (peer.state != _RTS and peer.state != _RTR) or peer.ctx.dead):
            self._fail(rec, WcStatus.RETRY_EXC_ERR)
            return
        remote = peer.ctx.mrs.get(wr.rkey)
        write = wr.opcode == _WRITE
        need = ACCESS_REMOTE_WRITE if write else ACCESS_REMOTE_READ
        ro = wr.remote_addr - remote.addr if remote is not None else -1
        if (remote is None or remote.pd is not peer.pd or not remote.access & need
                or ro < 0 or ro + length > remote.length):
            self._fail(rec, WcStatus.REM_ACCESS_ERR)
            self._to_err(peer)
            return
        if write:
            remote.view[ro:ro + length] = local.view[lo:lo + length]
        else:
            local.view[lo:lo + length] = remote.view[ro:ro + length]
        self._complete(rec, _SUCCESS)

    def _fail(self, rec: _Pending, status: int) -> None:
        self._complete(rec, status)
        self._to_err(rec.qp)

    def _complete(self, rec: _Pending, status: int) -> None:
        rec.done = True
        wr = rec.wr
        qp = rec.qp
        qp.cq.entries.append(
            WorkCompletion(wr.wr_id, status, wr.opcode, wr.length if status == 0 else 0,
                           qp.qp_num, rec.seq))

    def _to_err(self, qp: SimQP) -> None:
        if qp.destroyed:
            return
        qp.state = QPState.ERR
        if qp.pending:
            recs = sorted(qp.pending, key=lambda r: r.seq)
            qp.pending.clear()
            for rec in recs:
                self.deliverable -= 1
                self._complete(rec, WcStatus.WR_FLUSH_ERR)
