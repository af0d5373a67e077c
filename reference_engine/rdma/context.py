"""A local RNIC as the transport uses it: PD, CQs with outstanding counters, endpoint store,
the QP -> endpoint map for async events, an active flag and a failure counter."""

from __future__ import annotations

from reference_engine.rdma.endpoint import Endpoint
from reference_engine.rdma.endpoint_store import EndpointStore
from reference_engine.rdma.verbs import VerbsError

FAILURE_THRESHOLD = 32


class LocalContext:
    def __init__(self, transport, index: int, verbs_ctx, config):
        self.transport = transport
        self.index = index
        self.verbs = verbs_ctx
        self.device_name = verbs_ctx.device_name
        self.nic_path = f"{transport.server_name}@{verbs_ctx.device_name}"
        self.gid_seen = verbs_ctx.query_gid()
        self.pending_events = getattr(verbs_ctx, "pending_events", None)
        """How many async events wait (simulator); None when the backend cannot tell."""
        self.pd = verbs_ctx.alloc_pd()
        self.cqs = [(verbs_ctx.create_cq(config.max_cqe),
                     transport.counter_type(f"{self.nic_path}/cq{i}"))
                    for i in range(config.num_cq_per_ctx)]
        self._cq_next = 0
        self.config = config
        self.store = EndpointStore(config.max_ep_per_ctx, config.store_type)
        self.store.clock = transport.clock
        self.store.on_evict = transport.policies.retire.evict_hook(self.store)
        self.qp_owner: dict[int, Endpoint] = {}
        self.slots: list[Endpoint | None] = []
        """Endpoint "addresses": a destroyed endpoint's slot is reused (LIFO) by the next one,
        as freed memory is. ``qp_slot`` maps a QP to its endpoint's slot and is never pruned: it
        is the raw ``qp_context`` pointer an async event carries (the legacy QP-fatal path
        follows it, and may land on a newer endpoint)."""
        self.free_slots: list[int] = []
        self.qp_slot: dict[int, int] = {}
        self.active = True
        self.failure_count = 0
        self._generation = 0
        self.pool = None

    def __repr__(self) -> str:
        return f"LocalContext({self.nic_path}, active={self.active})"

    def alloc_slot(self, ep: Endpoint) -> int:
        if self.free_slots:
            slot = self.free_slots.pop()
            self.slots[slot] = ep
        else:
            slot = len(self.slots)
            self.slots.append(ep)
        return slot

    def free_slot(self, slot: int, ep: Endpoint) -> None:
        if 0 <= slot < len(self.slots) and self.slots[slot] is ep:
            self.slots[slot] = None
            self.free_slots.append(slot)

    def pick_cq(self):
        cq = self.cqs[self._cq_next % len(self.cqs)]
        self._cq_next += 1
        return cq

    def _new_endpoint(self, path: str) -> Endpoint | None:
        self._generation += 1
        ep = Endpoint(self, path, self._generation)
        try:
            ep.construct(self.config.num_qp_per_ep, self.config.max_wr, self.config.max_cqe)
        except VerbsError:
            return None
        return ep

    def endpoint(self, path: str) -> Endpoint | None:
        """The active endpoint for ``path``, made (unconnected) when there is none."""
        if not self.active or not path:
            return None
        ep = self.store.get(path)
        if ep is not None:
            return ep
        ep = self.store.insert(path, lambda: self._new_endpoint(path))
        self.store.reclaim(self.transport.clock.now(), None, self.transport.on_forced_reclaim)
        return ep

    def note_local_failure(self) -> None:
        self.failure_count += 1
        if self.failure_count >= FAILURE_THRESHOLD:
            self.active = False

    def cq_outstanding(self) -> int:
        return sum(c.value for _, c in self.cqs)
