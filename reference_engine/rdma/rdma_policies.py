"""The RDMA path's strategies, handed to the transport at construction by the profile registry
(``reference_engine.profiles``).

``rfc``: per-post tokens as wr_id, slice attempt ids, endpoint generations, one retire path for
every cause, shared worker model unless ``MC_RDMA_DEDICATED_POLLER`` is set, replacement
detection by ``instance_id``.

``legacy`` (Mooncake before the RFC): the slice itself is the wr_id, so a completion reads
whatever endpoint and QP-depth pointer the slice carries *now*; no attempt ids, no generations;
each deletion cause deletes on its own through raw pointers (a completion error deletes the
slice's current endpoint; a QP-fatal event follows the QP's context pointer, which a newer
endpoint may have reused); a forced reclaim subtracts the outstanding depth from the CQ counter
and leaves the posted slices to their fate; dedicated poller by default; no replacement
detection. Two-phase destruction itself is Mooncake's (0.3.12 has it for every cause).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reference_engine.rdma.slices import SliceTable
from reference_engine.rdma.tokens import TokenPool
from reference_engine.rdma.verbs import WcStatus


# ---------------------------------------------------------------------- completion ownership
class TokenOwnership:
    """wr_id names one posted attempt; completions release exactly the token's counters."""

    def __init__(self) -> None:
        self.tokens = TokenPool()

    def wr_id(self, s, ep, depth) -> int:
        return self.tokens.acquire(s, ep, depth, ep.cq_outstanding).wr_id

    def unpost(self, wr_id: int, depth, cq) -> None:
        tok = self.tokens.lookup(wr_id)
        if tok is not None:
            self.tokens.release(tok, wr_id)

    def complete(self, wc, cq_outstanding):
        """The completed post's (slice, endpoint, generation, attempt), read before its release;
        None when the post was already released (a forced reclaim got there first: what was
        read may be the next post's, which took the token from the pool meanwhile)."""
        wr_id = wc.wr_id
        tok = self.tokens.lookup(wr_id)
        if tok is None:
            return None
        view = (tok.slice, tok.endpoint, tok.generation, tok.attempt)
        if not self.tokens.release(tok, wr_id):
            return None
        return view

    @staticmethod
    def current(view) -> bool:
        return view[3] == view[0].attempt

    @staticmethod
    def new_attempt(s) -> None:
        s.attempt += 1

    def orphan(self, ep) -> list:
        """Forced reclaim: release the endpoint's outstanding tokens; return (slice, attempt) of
        those that were their slice's current attempt."""
        out = []
        for wr_id, tok in list(self.tokens.live.items()):
            s, attempt, owner = tok.slice, tok.attempt, tok.endpoint
            if owner is ep and self.tokens.release(tok, wr_id) and attempt == s.attempt:
                out.append((s, attempt))
        return out

    def peek(self, wr_id: int):
        tok = self.tokens.lookup(wr_id)
        return tok.slice if tok is not None else None

    def outstanding(self) -> int:
        return self.tokens.outstanding()

    def register(self, s) -> None:
        pass

    def unregister(self, s) -> None:
        pass


class SliceOwnership:
    """Legacy: wr_id is the slice (its table index standing in for ``Slice*``)."""

    def __init__(self) -> None:
        self.table = SliceTable()

    def wr_id(self, s, ep, depth) -> int:
        s.endpoint = ep
        s.qp_depth = depth
        return s.index

    def unpost(self, wr_id: int, depth, cq) -> None:
        s = self.table.slots[wr_id]
        s.qp_depth.add(-1)
        cq.add(-1)

    def complete(self, wc, cq_outstanding):
        s = self.table.slots[wc.wr_id] if wc.wr_id < len(self.table.slots) else None
        if s is None:
            return None
        if s.qp_depth is not None:
            s.qp_depth.add(-1)
        cq_outstanding.add(-1)
        return (s, None, 0, 0)

    @staticmethod
    def current(view) -> bool:
        return True

    @staticmethod
    def new_attempt(s) -> None:
        pass

    @staticmethod
    def orphan(ep) -> list:
        for d in ep.depth:
            ep.cq_outstanding.add(-d.value)
        return []

    def peek(self, wr_id: int):
        slots = self.table.slots
        return slots[wr_id] if wr_id < len(slots) else None

    def outstanding(self) -> int:
        return 0

    def register(self, s) -> None:
        self.table.add(s)

    def unregister(self, s) -> None:
        self.table.remove(s)


# ---------------------------------------------------------------------- endpoint retirement
def _no_yield() -> Iterator[str]:
    return iter(())


class UnifiedRetire:
    """Every cause goes through ``EndpointStore.retire`` (CO-6); stale tokens retire nothing."""

    name = "unified"

    def for_completion(self, tr, view, wc) -> Iterator[str]:
        ep = view[1]
        if ep is not None and ep.generation == view[2] and not ep.retired:
            if tr.observer is not None:
                tr.observer.on_completion_retire(wc, ep)
            ep.ctx.store.retire(ep, "cq_error")
        return _no_yield()

    def for_qp_fatal(self, tr, ctx, qp_num: int) -> Iterator[str]:
        ep = ctx.qp_owner.get(qp_num)
        if ep is not None and not ep.retired:
            if tr.observer is not None:
                tr.observer.on_event_retire(qp_num, ep)
            ctx.store.retire(ep, "qp_fatal")
        return _no_yield()

    def for_handshake_failure(self, tr, ep) -> Iterator[str]:
        ep.ctx.store.retire(ep, "handshake_failed")
        return _no_yield()

    def disconnect_all(self, tr, ctx, cause: str) -> Iterator[str]:
        for ep in ctx.store.endpoints():
            ctx.store.retire(ep, cause)
        return _no_yield()

    def passive_stale(self, tr, ep) -> None:
        ep.ctx.store.retire(ep, "passive_stale")

    def evict_hook(self, store):
        return store.retire_evicted

    def replacement(self, tr, paths) -> int:
        n = 0
        for ctx in tr.contexts:
            for ep in ctx.store.endpoints():
                if ep.peer_nic_path in paths and ctx.store.retire(ep, "replacement"):
                    n += 1
        return n


class ScatteredDeletion:
    """Legacy: each cause deletes on its own, as Mooncake's paths do: a completion error deletes
    the endpoint the slice's raw pointer names *now*; a QP-fatal event follows the QP's raw
    context pointer (an endpoint "address" that a newer endpoint may occupy); eviction, stale
    passive handshakes and disconnect-all call the store's two-phase delete. No generations,
    no record of a single retire path."""

    name = "scattered"

    @staticmethod
    def _delete_by_ptr(tr, ep) -> bool:
        store = ep.ctx.store
        with store.lock:
            if not store.remove(ep):
                return False
            ep.begin_destroy(tr.clock.now())
            store.waiting.append(ep)
            return True

    def for_completion(self, tr, view, wc) -> Iterator[str]:
        ep = view[0].endpoint
        if ep is not None and wc.status != WcStatus.WR_FLUSH_ERR:
            if tr.observer is not None:
                tr.observer.on_completion_retire(wc, ep)
            self._delete_by_ptr(tr, ep)
        return _no_yield()

    def for_qp_fatal(self, tr, ctx, qp_num: int) -> Iterator[str]:
        slot = ctx.qp_slot.get(qp_num)
        ep = ctx.slots[slot] if slot is not None and slot < len(ctx.slots) else None
        if ep is not None and ep.in_map:
            if tr.observer is not None:
                tr.observer.on_event_retire(qp_num, ep)
            self._delete_by_ptr(tr, ep)
        return _no_yield()

    def for_handshake_failure(self, tr, ep) -> Iterator[str]:
        self._delete_by_ptr(tr, ep)
        return _no_yield()

    def disconnect_all(self, tr, ctx, cause: str) -> Iterator[str]:
        for ep in ctx.store.endpoints():
            self._delete_by_ptr(tr, ep)
        return _no_yield()

    def passive_stale(self, tr, ep) -> None:
        self._delete_by_ptr(tr, ep)

    def evict_hook(self, store):
        def evict(ep) -> None:
            store.remove(ep)
            ep.begin_destroy(store.clock.now())
            store.waiting.append(ep)
        return evict

    def replacement(self, tr, paths) -> int:
        return 0


# ---------------------------------------------------------------------- worker models
class SharedModel:
    """Each worker posts shards t, t+n, ... and polls CQs t, t+n, ... (Mooncake's historical model)."""

    name = "shared"

    def __init__(self, workers: int, shards: int, cqs: int):
        self.workers = workers
        self.shards = shards
        self.cqs = cqs

    def post_shards(self, t: int) -> list[int]:
        return list(range(t, self.shards, self.workers))

    def poll_cqs(self, t: int) -> list[int]:
        return list(range(t, self.cqs, self.workers))


class DedicatedPollerModel(SharedModel):
    """Worker 0 polls every CQ; workers 1..n-1 post (one worker does both)."""

    name = "dedicated"

    def post_shards(self, t: int) -> list[int]:
        if self.workers == 1:
            return list(range(self.shards))
        if t == 0:
            return []
        return list(range(t - 1, self.shards, self.workers - 1))

    def poll_cqs(self, t: int) -> list[int]:
        return list(range(self.cqs)) if t == 0 else []


def _truthy(value: Any) -> bool | None:
    if value is None:
        return None
    return str(value).strip().lower() not in ("", "0", "false", "no", "off")


# ---------------------------------------------------------------------- bundle
@dataclass(frozen=True)
class RdmaPolicies:
    """One transport's strategies: who owns a completion, how endpoints retire, which worker
    polls which CQ by default, and whether peers are tracked by ``instance_id``."""

    dedicated_poller_default: bool
    make_ownership: type
    retire: Any
    make_peer_tracking: type

    def worker_model(self, env: Mapping[str, str], workers: int, shards: int, cqs: int):
        flag = _truthy(env.get("MC_RDMA_DEDICATED_POLLER"))
        dedicated = self.dedicated_poller_default if flag is None else flag
        cls = DedicatedPollerModel if dedicated and workers > 1 else SharedModel
        return cls(workers, shards, cqs)
