"""RDMA endpoints: the RC QPs from one local NIC to one peer NIC path.

An endpoint has a ``generation`` (unique per context), a ``postable`` flag cleared by
retirement, per-QP outstanding-WR counters and the CQ's outstanding counter. The handshake
exchanges what Mooncake's does (NIC paths, GID/LID, QP numbers) through an RPC callable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from reference_engine.rdma import slices as S
from reference_engine.rdma.counters import Counter
from reference_engine.rdma.verbs import PostSendError, VerbsError, WorkRequest

INITIALIZING = "INITIALIZING"
UNCONNECTED = "UNCONNECTED"
CONNECTING = "CONNECTING"
CONNECTED = "CONNECTED"
DESTROYING = "DESTROYING"
DESTROYED = "DESTROYED"

CONNECT_OK = "ok"
CONNECT_BUSY = "busy"
CONNECT_FAILED = "failed"

Rpc = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]
"""``rpc(peer_server_name, handshake_request) -> handshake_reply`` (dicts with Mooncake's keys)."""


def server_of(nic_path: str) -> str:
    return nic_path.rpartition("@")[0]


def device_of(nic_path: str) -> str:
    return nic_path.rpartition("@")[2]


class Endpoint:
    def __init__(self, ctx, peer_nic_path: str, generation: int):
        self.ctx = ctx
        self.peer_nic_path = peer_nic_path
        self.generation = generation
        self.state = INITIALIZING
        self.postable = True
        self.in_map = False
        self.has_connected = False
        self.inactive_since = 0.0
        self.qps: list = []
        self.depth: list[Counter] = []
        self.cq = None
        self.cq_outstanding: Counter | None = None
        self.peer_qp_nums: list[int] = []
        self.lock = threading.Lock()
        self.max_wr = 0
        self.max_cqe = 0
        self.last_error = ""
        self.slot = -1

    def __repr__(self) -> str:
        return (f"Endpoint({self.ctx.nic_path}->{self.peer_nic_path} gen={self.generation} "
                f"{self.state})")

    @property
    def retired(self) -> bool:
        return self.state in (DESTROYING, DESTROYED)

    @property
    def qp_nums(self) -> list[int]:
        return [qp.qp_num for qp in self.qps]

    def construct(self, num_qp: int, max_wr: int, max_cqe: int) -> None:
        ctx = self.ctx
        self.cq, self.cq_outstanding = ctx.pick_cq()
        self.max_wr = max_wr
        self.max_cqe = max_cqe
        self.qps = [ctx.verbs.create_qp(ctx.pd, self.cq, max_wr) for _ in range(num_qp)]
        self.slot = ctx.alloc_slot(self)
        for qp in self.qps:
            ctx.qp_owner[qp.qp_num] = self
            ctx.qp_slot[qp.qp_num] = self.slot
        counter = ctx.transport.counter_type
        self.depth = [counter(f"{self.peer_nic_path}#{self.generation}/qp{i}")
                      for i in range(num_qp)]
        self.state = UNCONNECTED

    def _reconstruct(self) -> None:
        """Fresh QPs after a failed handshake. The device may have died meanwhile (a fatal
        event read by no one yet): then the endpoint keeps no QPs, can never connect or post,
        and says why in ``last_error``; the worker retires it like any failed handshake."""
        count = len(self.qps)
        for qp in self.qps:
            try:
                qp.destroy()
            except VerbsError:
                pass
        self.qps = []
        try:
            for _ in range(count):
                self.qps.append(self.ctx.verbs.create_qp(self.ctx.pd, self.cq, self.max_wr))
        except VerbsError as exc:
            for qp in self.qps:
                qp.destroy()
            self.qps = []
            self.postable = False
            self.last_error += f"; re-creating its QPs failed: {exc}"
        for qp in self.qps:
            self.ctx.qp_owner[qp.qp_num] = self
            self.ctx.qp_slot[qp.qp_num] = self.slot
        self.state = UNCONNECTED

    # ------------------------------------------------------------------ handshake
    def handshake_desc(self) -> dict[str, Any]:
        ctx = self.ctx
        return {
            "local_nic_path": ctx.nic_path,
            "local_lid": ctx.verbs.lid,
            "local_gid": ctx.verbs.gid,
            "peer_nic_path": self.peer_nic_path,
            "qp_num": self.qp_nums,
            "reply_msg": "",
        }

    def _bring_up(self, peer_qps: list[int], peer_gid: str, peer_lid: int) -> None:
        for qp, dest in zip(self.qps, peer_qps, strict=True):
            qp.to_init()
            qp.to_rtr(dest, peer_gid, peer_lid)
            qp.to_rts()
        self.peer_qp_nums = list(peer_qps)

    def connect_active(self, rpc: Rpc) -> str:
        with self.lock:
            if self.state == CONNECTED:
                return CONNECT_OK
            if self.state != UNCONNECTED:
                return CONNECT_BUSY if self.state == CONNECTING else CONNECT_FAILED
            if not self.qps:
                return CONNECT_FAILED
            self.state = CONNECTING
        try:
            reply = rpc(server_of(self.peer_nic_path), self.handshake_desc())
            error = _check_reply(reply, self.peer_nic_path, self.ctx.nic_path, len(self.qps))
            if error is None:
                self._bring_up([int(q) for q in reply["qp_num"]], str(reply.get("local_gid", "")),
                               int(reply.get("local_lid", 0) or 0))
        except (OSError, VerbsError, ValueError, KeyError, TypeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        with self.lock:
            if self.state != CONNECTING:
                return CONNECT_FAILED
            if error is None:
                self.state = CONNECTED
                self.has_connected = True
                return CONNECT_OK
            self.last_error = error
            self._reconstruct()
            return CONNECT_FAILED

    def accept_passive(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Bring our QPs up towards the requester's; returns the reply descriptor."""
        qps = [int(q) for q in request.get("qp_num", [])]
        if len(qps) != len(self.qps):
            return {**self.handshake_desc(),
                    "reply_msg": "QP count mismatch; check MC_NUM_QP_PER_EP on both sides"}
        with self.lock:
            if self.state != UNCONNECTED:
                return {**self.handshake_desc(), "reply_msg": f"endpoint busy ({self.state})"}
            self._bring_up(qps, str(request.get("local_gid", "")),
                           int(request.get("local_lid", 0) or 0))
            self.state = CONNECTED
            self.has_connected = True
        return self.handshake_desc()

    # ------------------------------------------------------------------ data path
    def post(self, slices: list, ownership, observer) -> tuple[list, list]:
        """Post ``slices``; returns (failed, unposted). Posted slices are not returned.

        The endpoint's lock covers its own QPs; the CQ is the context's, shared with the
        endpoints of other peers that other workers post, so each QP's share of the CQ's free
        entries is taken on the CQ's counter itself (``take``), never read here and added
        later."""
        with self.lock:
            if not self.postable or self.state != CONNECTED:
                return slices, []
            cq = self.cq_outstanding
            max_cqe = self.max_cqe
            nq = len(self.qps)
            chunk = -(-len(slices) // nq)
            failed: list = []
            rest: list = []
            start = 0
            for q in range(nq):
                part = slices[start:start + chunk]
                start += chunk
                if not part:
                    break
                depth = self.depth[q]
                n = cq.take(min(len(part), self.max_wr - depth.value), max_cqe)
                if n <= 0:
                    rest.extend(part)
                    continue
                batch = part[:n] if n < len(part) else part
                if n < len(part):
                    rest.extend(part[n:])
                wrs = []
                wr_id = ownership.wr_id
                posted = S.POSTED
                for s in batch:
                    wrs.append(WorkRequest(wr_id(s, self, depth), s.opcode, s.source_addr,
                                           s.length, s.source_lkey, s.dest_addr, s.dest_rkey))
                    s.status = posted
                depth.add(n)
                if observer is not None:
                    observer.on_post(self, batch)
                try:
                    self.qps[q].post_send(wrs)
                except PostSendError as exc:
                    bad = exc.bad_index
                    for wr in wrs[bad:]:
                        ownership.unpost(wr.wr_id, depth, cq)
                    for s in batch[bad:]:
                        s.status = S.PENDING
                    failed.extend(batch[bad:])
                    rest.extend(slices[start:])
                    break
            return failed, rest

    # ------------------------------------------------------------------ destruction
    def begin_destroy(self, now: float) -> None:
        with self.lock:
            self.postable = False
            if self.state == DESTROYED:
                return
            self.state = DESTROYING
            self.inactive_since = now
            if self.has_connected:
                for qp in self.qps:
                    try:
                        qp.to_err()
                    except VerbsError:
                        pass

    def drained(self) -> bool:
        for d in self.depth:
            if d.value > 0:
                return False
        return True

    def destroy_qps(self) -> None:
        with self.lock:
            self.postable = False
            for qp in self.qps:
                try:
                    qp.destroy()
                except VerbsError:
                    pass
                if self.ctx.qp_owner.get(qp.qp_num) is self:
                    del self.ctx.qp_owner[qp.qp_num]
            if self.state != DESTROYED and self.slot >= 0:
                self.ctx.free_slot(self.slot, self)
            self.state = DESTROYED


def _check_reply(reply: Mapping[str, Any], target: str, own: str, nq: int) -> str | None:
    if not isinstance(reply, Mapping):
        return "handshake reply is not an object"
    if reply.get("reply_msg"):
        return f"handshake rejected: {reply['reply_msg']}"
    if reply.get("local_nic_path") != target or reply.get("peer_nic_path") != own:
        return "peer nic path inconsistency in handshake reply"
    qps = reply.get("qp_num")
    if not isinstance(qps, list) or len(qps) != nq:
        return "QP count mismatch in handshake reply"
    return None
