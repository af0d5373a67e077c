"""The worker pool of one local context: shard queues, post steps and completion handling.

Each worker is a generator yielding named points (``points``). The same generator runs under
the controlled scheduler (one thread, a strategy picks the next actor at every point) and
free-running (a real thread iterates it; a point costs one generator resume).
"""

from __future__ import annotations

import threading
import zlib

from reference_engine.rdma import points as P
from reference_engine.rdma.endpoint import CONNECT_BUSY, CONNECT_FAILED
from reference_engine.rdma.verbs import LOCAL_WC_ERRORS, WcStatus

SUCCESS = WcStatus.SUCCESS
FLUSH = WcStatus.WR_FLUSH_ERR


def shard_of(target: str, device_id: int, shards: int) -> int:
    return (zlib.crc32(target.encode()) * 10007 + max(device_id, 0)) % shards


class WorkerPool:
    def __init__(self, ctx, transport, model):
        self.ctx = ctx
        self.transport = transport
        self.model = model
        self.shards: list[dict[str, list]] = [{} for _ in range(model.shards)]
        self.lock = threading.Lock()
        self._wakeup: threading.Event | None = None
        self.poll_batch = transport.config.poll_batch
        self._post = [model.post_shards(t) for t in range(model.workers)]
        self._polled = [[ctx.cqs[ci][0] for ci in model.poll_cqs(t)] for t in range(model.workers)]

    # ------------------------------------------------------------------ queues
    def enqueue(self, shard: int, path: str, slices: list) -> None:
        with self.lock:
            q = self.shards[shard]
            lst = q.get(path)
            if lst is None:
                q[path] = list(slices)
            else:
                lst.extend(slices)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.is_set():
            wakeup.set()

    @property
    def wakeup(self) -> threading.Event:
        """Set when work is queued; made on first use (only free-running threads wait on it,
        and a controlled run builds thousands of pools that never run a thread)."""
        if self._wakeup is None:
            self._wakeup = threading.Event()
        return self._wakeup

    def queued(self) -> int:
        return sum(len(v) for q in self.shards for v in q.values())

    def take_target(self, target: str) -> list:
        """Remove and return every queued slice bound for ``target`` (replacement rebuild)."""
        out = []
        with self.lock:
            for q in self.shards:
                for path in list(q):
                    keep = [s for s in q[path] if s.target != target]
                    out.extend(s for s in q[path] if s.target == target)
                    if keep:
                        q[path] = keep
                    else:
                        del q[path]
        return out

    def has_work(self, t: int) -> bool:
        shards = self.shards
        for sh in self._post[t]:
            if shards[sh]:
                return True
        for cq in self._polled[t]:
            if cq.pending():
                return True
        return False

    # ------------------------------------------------------------------ worker loop
    def run(self, t: int):
        post_shards = self.model.post_shards(t)
        poll_cqs = [self.ctx.cqs[ci] for ci in self.model.poll_cqs(t)]
        shards = self.shards
        tr = self.transport
        while not tr.stopped:
            worked = False
            for sh in post_shards:
                if shards[sh]:
                    worked = True
                    with self.lock:
                        queued = shards[sh]
                        shards[sh] = {}
                    for path, slices in queued.items():
                        yield from self._post_path(sh, path, slices)
            for cq, cqo in poll_cqs:
                if cq.pending():
                    worked = True
                    yield from self._poll(cq, cqo)
            if not worked:
                yield P.IDLE

    def _post_path(self, shard: int, path: str, slices: list):
        ctx = self.ctx
        tr = self.transport
        if not ctx.active:
            for s in slices:
                yield from tr.retry(s, handoff=True)
            return
        failed = slices
        refresh = False
        if tr.rails.available(path):
            ep = ctx.endpoint(path)
            if ep is not None:
                rc = ep.connect_active(tr.rpc)
                if rc == CONNECT_BUSY:
                    self.enqueue(shard, path, slices)
                    return
                if rc == CONNECT_FAILED:
                    tr.stats["handshake_failures"] += 1
                    if tr.has_alternative_rail(slices[0]):
                        tr.rails.mark_failed(path, immediate=True)
                    yield from tr.policies.retire.for_handshake_failure(tr, ep)
                    yield P.RETIRE
                    refresh = True
                else:
                    yield P.BEFORE_POST
                    failed, rest = ep.post(slices, tr.ownership, tr.observer)
                    if failed and not ep.postable:
                        tr.stats["posts_refused_retired"] += len(failed)
                    else:
                        refresh = True
                    yield P.AFTER_POST
                    if rest:
                        self.enqueue(shard, path, rest)
        for s in failed:
            yield from tr.retry(s, handoff=not ctx.active, refresh=refresh)

    def _poll(self, cq, cq_outstanding):
        wcs = cq.poll(self.poll_batch)
        if not wcs:
            return
        yield P.POLL
        tr = self.transport
        own = tr.ownership
        obs = tr.observer
        ctx = self.ctx
        failures = []
        for wc in wcs:
            view = own.complete(wc, cq_outstanding)
            if view is None or not own.current(view):
                tr.stats["stale_completions"] += 1
                continue
            s = view[0]
            if wc.status == SUCCESS:
                if obs is not None:
                    obs.on_effect(wc, s, "success")
                s.mark_success()
                ctx.failure_count = 0
            else:
                failures.append((view, wc))
        yield P.COMPLETION_HANDLED
        if not failures:
            return
        local_charged = False
        current = own.current
        for view, wc in failures:
            if not current(view):
                tr.stats["stale_completions"] += 1
                continue
            status = wc.status
            if status != FLUSH:
                if not ctx.active or status in LOCAL_WC_ERRORS:
                    if not local_charged:
                        ctx.note_local_failure()
                        local_charged = True
                else:
                    s = view[0]
                    if tr.has_alternative_rail(s):
                        tr.rails.mark_failed(s.peer_nic_path, immediate=True)
            yield from tr.policies.retire.for_completion(tr, view, wc)
        yield P.RETIRE
        for view, wc in failures:
            if not current(view):
                continue
            if obs is not None:
                obs.on_effect(wc, view[0], "retry")
            yield from tr.retry(view[0], handoff=not ctx.active,
                                refresh=wc.status != FLUSH)
