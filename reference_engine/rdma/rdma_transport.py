"""The RDMA transport of one process: local contexts and their worker pools, slicing and path
selection, retry and local handoff, replacement recovery, async events and reclaim.

Descriptors come from ``lookup(segment, force) -> SegmentDescriptor | None`` (the metadata
cache's lookup: ``force`` bypasses the TTL). Handshakes go through ``rpc(server, request)``.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from reference_engine.descriptor import Buffer, Device, SegmentDescriptor
from reference_engine.rdma import points as P
from reference_engine.rdma.clock import RealClock
from reference_engine.rdma.config import RdmaConfig
from reference_engine.rdma.context import LocalContext
from reference_engine.rdma.counters import Counter, SerialCounter
from reference_engine.rdma.endpoint import UNCONNECTED, Rpc, device_of
from reference_engine.rdma.rail_state import RailTable
from reference_engine.rdma.rdma_policies import RdmaPolicies
from reference_engine.rdma.slices import PENDING, Slice, Task
from reference_engine.rdma.verbs import CONTEXT_FATAL_EVENTS, AsyncEventType, Opcode
from reference_engine.rdma.worker_pool import WorkerPool, shard_of

Lookup = Callable[[str, bool], "SegmentDescriptor | None"]
_WRITE, _READ = Opcode.RDMA_WRITE, Opcode.RDMA_READ
log = logging.getLogger("reference_engine.rdma")


@dataclass
class LocalBuffer:
    name: str
    addr: int
    length: int
    lkeys: tuple[int, ...]
    rkeys: tuple[int, ...]

    def contains(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length


class RdmaTransport:
    def __init__(self, server_name: str, verbs_contexts: Sequence, *, lookup: Lookup, rpc: Rpc,
                 policies: RdmaPolicies, config: RdmaConfig | None = None,
                 clock=None, instance_id: str | None = None, observer=None):
        self.server_name = server_name
        self.policies = policies
        self.config = config or RdmaConfig()
        self.clock = clock or RealClock()
        self.virtual_time = self.clock.virtual
        self.counter_type = SerialCounter if self.virtual_time else Counter
        """On a virtual clock every actor runs on the controlled scheduler's one thread."""
        self.lookup_fn = lookup
        self.rpc = rpc
        self.instance_id = instance_id
        self.observer = observer
        self.ownership = policies.make_ownership()
        self.peers = policies.make_peer_tracking()
        self.rails = RailTable(self.clock, self.config.rail_pause_seconds)
        self.stats: collections.Counter[str] = collections.Counter()
        self.stopped = False
        self.defunct = False
        """Set when the process this transport stands for is gone (a restarted peer)."""
        self.descriptors: dict[str, SegmentDescriptor] = {}
        self.buffers: list[LocalBuffer] = []
        self._orphans: list[tuple[Slice, int]] = []
        self._rr = 0
        self._path_cache: dict[str, tuple[SegmentDescriptor, list[str]]] = {}
        self._threads: list[threading.Thread] = []
        self.contexts = [LocalContext(self, i, v, self.config) for i, v in enumerate(verbs_contexts)]
        self.model = policies.worker_model(self.config.env, self.config.workers_per_ctx,
                                          self.config.shards, self.config.num_cq_per_ctx)
        for ctx in self.contexts:
            ctx.pool = WorkerPool(ctx, self, self.model)

    # ------------------------------------------------------------------ memory and identity
    def register_buffer(self, addr: int, length: int, name: str = "cpu:0") -> LocalBuffer:
        mrs = [ctx.pd.reg_mr(addr, length) for ctx in self.contexts]
        buf = LocalBuffer(name, addr, length, tuple(m.lkey for m in mrs),
                          tuple(m.rkey for m in mrs))
        self.buffers.append(buf)
        return buf

    def local_descriptor(self) -> SegmentDescriptor:
        return SegmentDescriptor(
            name=self.server_name, protocol="rdma",
            buffers=tuple(Buffer(b.name, b.addr, b.length, b.lkeys, b.rkeys) for b in self.buffers),
            devices=tuple(Device(c.device_name, c.verbs.query_gid(), c.verbs.lid)
                          for c in self.contexts),
            instance_id=self.instance_id)

    # ------------------------------------------------------------------ submission
    def submit(self, target: str, requests: Iterable[tuple[int, int, int, int]]) -> Task:
        """Queue transfers ``(opcode, source_addr, length, dest_addr)`` to segment ``target``."""
        task = Task(target)
        config = self.config
        size, retry_cnt = config.slice_size, config.retry_cnt
        register = self.ownership.register
        slices = task.slices
        for opcode, src, length, dst in requests:
            if opcode != _WRITE and opcode != _READ:
                raise ValueError(f"opcode must be RDMA_WRITE or RDMA_READ, got {opcode!r}")
            for off in range(0, length, size):
                s = Slice(task, opcode, src + off, min(size, length - off), dst + off, retry_cnt)
                register(s)
                slices.append(s)
        task.slice_count = len(slices)
        desc = self.lookup(target, False)
        batches: dict[tuple[int, str, int], list[Slice]] = {}
        select_local, select_peer = self.select_local, self.select_peer
        rr = self._rr
        for s in slices:
            rr += 1
            if desc is None or not select_local(s, rr) or not select_peer(s, desc, s.ctx_index):
                self.stats["submit_failures"] += 1
                s.mark_failed()
                continue
            key = (s.ctx_index, s.peer_nic_path, s.device_id)
            batch = batches.get(key)
            if batch is None:
                batches[key] = [s]
            else:
                batch.append(s)
        self._rr = rr
        shards = config.shards
        for (ctx_index, path, device_id), batch in batches.items():
            self.contexts[ctx_index].pool.enqueue(shard_of(target, device_id, shards), path, batch)
        return task

    def free_task(self, task: Task) -> None:
        for s in task.slices:
            self.ownership.unregister(s)

    def _enqueue(self, s: Slice) -> None:
        pool = self.contexts[s.ctx_index].pool
        pool.enqueue(shard_of(s.target, s.device_id, self.config.shards), s.peer_nic_path, [s])

    def select_local(self, s: Slice, start: int) -> bool:
        addr = s.source_addr
        end = addr + s.length
        for buf in self.buffers:
            if buf.addr <= addr and end <= buf.addr + buf.length:
                break
        else:
            return False
        contexts = self.contexts
        n = len(contexts)
        for k in range(n):
            i = (start + k) % n
            if contexts[i].active:
                s.ctx_index = i
                s.source_lkey = buf.lkeys[i]
                return True
        return False

    def _paths(self, desc: SegmentDescriptor) -> list[str]:
        """Peer NIC paths of ``desc``'s devices, computed once per descriptor snapshot."""
        cached = self._path_cache.get(desc.name)
        if cached is None or cached[0] is not desc:
            server = desc.rdma_server_name or desc.name
            cached = (desc, [f"{server}@{d.name}" for d in desc.devices or ()])
            self._path_cache[desc.name] = cached
            for path in cached[1]:
                self.peers.record_path(desc.name, path)
        return cached[1]

    def select_peer(self, s: Slice, desc: SegmentDescriptor, rr: int) -> bool:
        buf = desc.find_buffer(s.dest_addr, s.length)
        if buf is None or not desc.devices or not buf.rkey:
            return False
        paths = self._paths(desc)
        n = min(len(paths), len(buf.rkey))
        available = self.rails.available
        for k in range(n):
            d = (rr + k) % n
            path = paths[d]
            if available(path):
                s.device_id = d
                s.dest_rkey = buf.rkey[d]
                s.peer_nic_path = path
                if s.target != desc.name:
                    self.peers.record_path(s.target, path)
                return True
        return False

    def has_alternative_rail(self, s: Slice) -> bool:
        desc = self.descriptors.get(s.target)
        if desc is None or not desc.devices:
            return False
        server = desc.rdma_server_name or desc.name
        return any(f"{server}@{d.name}" != s.peer_nic_path
                   and self.rails.available(f"{server}@{d.name}") for d in desc.devices)

    # ------------------------------------------------------------------ metadata and replacement
    def lookup(self, target: str, force: bool) -> SegmentDescriptor | None:
        if force:
            self.stats["refresh_forced"] += 1
        try:
            desc = self.lookup_fn(target, force)
        except Exception:  # noqa: BLE001 - a failed refresh is a None, never a crash
            desc = None
        if desc is not None:
            self.observe_descriptor(target, desc)
        return desc

    def observe_descriptor(self, target: str, desc: SegmentDescriptor) -> None:
        old_paths = self.peers.observe(target, desc)
        self.descriptors[target] = desc
        if old_paths is None:
            return
        self.stats["replacements"] += 1
        log.warning("%s: replacement of %s detected (instance %s); retiring %d path(s)",
                    self.server_name, target, desc.instance_id, len(old_paths))
        self.stats["endpoints_retired_by_replacement"] += self.policies.retire.replacement(
            self, old_paths)
        self.rails.clear(old_paths)
        for ctx in self.contexts:
            for s in ctx.pool.take_target(target):
                if self.select_peer(s, desc, s.retry_cnt + s.ctx_index):
                    self._enqueue(s)
                else:
                    s.mark_failed()

    # ------------------------------------------------------------------ retry and handoff
    def retry(self, s: Slice, handoff: bool = False, refresh: bool = True):
        """Retry ``s`` within its budget (a generator yielding RETRY or HANDOFF)."""
        if self.observer is not None:
            self.observer.on_retry(s)
        self.stats["retries"] += 1
        s.retry_cnt += 1
        if s.retry_cnt >= s.max_retry_cnt:
            self.stats["retries_exhausted"] += 1
            log.warning("%s: slice to %s failed after %d retries", self.server_name, s.target,
                        s.retry_cnt)
            s.mark_failed()
            return
        self.ownership.new_attempt(s)
        s.status = PENDING
        if handoff:
            if not self.handoff(s):
                s.mark_failed()
            yield P.HANDOFF
            return
        desc = self.lookup(s.target, refresh)
        while desc is None:
            s.retry_cnt += 1
            if s.retry_cnt >= s.max_retry_cnt:
                self.stats["retries_exhausted"] += 1
                s.mark_failed()
                return
            desc = self.lookup(s.target, True)
        if self.select_peer(s, desc, s.retry_cnt + s.ctx_index):
            self._enqueue(s)
        else:
            s.mark_failed()
        yield P.RETRY

    def handoff(self, s: Slice) -> bool:
        """Move ``s`` to another active local context (local RNIC handoff)."""
        n = len(self.contexts)
        buf = next((b for b in self.buffers if b.contains(s.source_addr, s.length)), None)
        if buf is None:
            return False
        for k in range(n):
            i = (s.retry_cnt + k) % n
            ctx = self.contexts[i]
            if i == s.ctx_index or not ctx.active:
                continue
            s.ctx_index = i
            s.source_lkey = buf.lkeys[i]
            s.endpoint = None
            self.stats["handoffs"] += 1
            self._enqueue(s)
            return True
        return False

    def force_retry(self, s: Slice, handoff: bool = False) -> None:
        """Retry or hand off ``s`` now, whatever its state (a test lever)."""
        for _ in self.retry(s, handoff=handoff):
            pass

    def on_forced_reclaim(self, ep) -> None:
        self.stats["forced_reclaims"] += 1
        log.warning("%s: endpoint %s generation %d destroyed after the drain timeout",
                    self.server_name, ep.peer_nic_path, ep.generation)
        self._orphans.extend(self.ownership.orphan(ep))

    # ------------------------------------------------------------------ passive handshake
    def on_handshake(self, request: Mapping) -> dict:
        peer_path = str(request.get("peer_nic_path", ""))
        ctx = next((c for c in self.contexts if c.device_name == device_of(peer_path)), None)
        if ctx is None:
            return {"reply_msg": f"Local RDMA context not found for {peer_path!r}"}
        requester = str(request.get("local_nic_path", ""))
        if peer_path != ctx.nic_path or not requester:
            return {"reply_msg": "Invalid argument: peer nic path inconsistency"}
        ep = ctx.store.get(requester)
        if ep is not None and ep.state != UNCONNECTED:
            self.policies.retire.passive_stale(self, ep)
            self.stats["passive_stale"] += 1
        ep = ctx.endpoint(requester)
        if ep is None:
            return {"reply_msg": "cannot create endpoint"}
        return ep.accept_passive(request)

    # ------------------------------------------------------------------ monitor
    def disconnect_all(self, cause: str = "disconnect_all") -> None:
        for ctx in self.contexts:
            for _ in self.policies.retire.disconnect_all(self, ctx, cause):
                pass

    def _on_async(self, ctx: LocalContext, ev):
        self.stats["async_events"] += 1
        retire = self.policies.retire
        if ev.type == AsyncEventType.QP_FATAL and ev.qp_num is not None:
            yield from retire.for_qp_fatal(self, ctx, ev.qp_num)
        elif ev.type in CONTEXT_FATAL_EVENTS:
            ctx.active = False
            yield from retire.disconnect_all(self, ctx, "device_fatal")
        elif ev.type == AsyncEventType.GID_CHANGE:
            gid = ctx.verbs.query_gid()
            if gid != ctx.gid_seen:
                ctx.gid_seen = gid
                yield from retire.disconnect_all(self, ctx, "gid_change")

    def monitor(self):
        timeout = self.config.destroy_timeout
        while not self.stopped:
            worked = False
            for ctx in self.contexts:
                ev = ctx.verbs.get_async_event()
                while ev is not None:
                    worked = True
                    yield from self._on_async(ctx, ev)
                    yield P.EVENT
                    ev = ctx.verbs.get_async_event()
            now = self.clock.now()
            for ctx in self.contexts:
                if ctx.store.waiting and ctx.store.reclaim(now, timeout, self.on_forced_reclaim):
                    worked = True
                    yield P.RECLAIM
            if self._orphans:
                worked = True
                orphans, self._orphans = self._orphans, []
                for s, attempt in orphans:
                    if s.attempt == attempt and not s.terminal:
                        yield from self.retry(s, handoff=not self.contexts[s.ctx_index].active)
            if not worked and self.virtual_time:
                deadlines = [d for d in (c.store.next_deadline(timeout) for c in self.contexts)
                             if d is not None]
                if deadlines:
                    self.clock.advance_to(min(deadlines))
                    worked = True
                    yield P.TIME
            if not worked:
                yield P.IDLE

    def monitor_has_work(self) -> bool:
        if self._orphans:
            return True
        for ctx in self.contexts:
            pending = ctx.pending_events
            if pending is None or pending():
                return True
            store = ctx.store
            if store.waiting and (self.virtual_time or store.reclaimable(
                    self.clock.now(), self.config.destroy_timeout)):
                return True
        return False

    # ------------------------------------------------------------------ running
    def actors(self) -> list[tuple[str, object, Callable[[], bool]]]:
        """(name, step generator, has_work) for every worker and the monitor."""
        out = []
        for ctx in self.contexts:
            for t in range(self.model.workers):
                out.append((f"{self.server_name}/{ctx.device_name}.w{t}", ctx.pool.run(t),
                            _bind(ctx.pool.has_work, t)))
        out.append((f"{self.server_name}/monitor", self.monitor(), self.monitor_has_work))
        return out

    def start(self) -> None:
        """Free-running: one real thread per worker plus the monitor."""
        if self.virtual_time:
            raise RuntimeError(f"{self.server_name}: a transport on a virtual clock runs under "
                               f"the controlled scheduler (actors()), not in threads")
        self.stopped = False
        for ctx in self.contexts:
            for t in range(self.model.workers):
                self._spawn(f"{ctx.nic_path}.w{t}", ctx.pool.run(t), ctx.pool.wakeup, 0.0005)
        self._spawn(f"{self.server_name}.monitor", self.monitor(), threading.Event(), 0.002)

    def _spawn(self, name: str, gen, wakeup: threading.Event, park: float) -> None:
        def drive() -> None:
            for point in gen:
                if point is P.IDLE:
                    wakeup.wait(park)
                    wakeup.clear()
        th = threading.Thread(target=drive, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop free-running threads; True when all of them ended within ``timeout``."""
        self.stopped = True
        for ctx in self.contexts:
            ctx.pool.wakeup.set()
        ok = True
        for th in self._threads:
            th.join(timeout)
            ok = ok and not th.is_alive()
        self._threads = []
        return ok

    def queued(self) -> int:
        return sum(ctx.pool.queued() for ctx in self.contexts)


def _bind(fn, arg):
    return functools.partial(fn, arg)
