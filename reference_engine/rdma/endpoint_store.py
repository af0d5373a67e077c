"""Endpoint stores keyed by peer NIC path, with FIFO or SIEVE eviction as Mooncake has them.

SIEVE follows Mooncake, not the textbook: a new entry goes to the front with visited=True.
Eviction starts at the hand (or the tail), walks toward the front wrapping to the tail, clears
visited bits, evicts the first unvisited entry and leaves the hand on the entry before it
(toward the front), or nowhere if the victim was the front.

Retirement (``retire``) is the one two-phase path: leave the map, stop posting, QPs to ERR, wait
on the waiting list; ``reclaim`` destroys drained endpoints, and those past the timeout after
their outstanding work was handed to ``on_force``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from reference_engine.rdma.endpoint import Endpoint

FIFO = "FIFO"
SIEVE = "SIEVE"

log = logging.getLogger("reference_engine.rdma")


class _Node:
    __slots__ = ("key", "visited", "prev", "next")

    def __init__(self, key: str):
        self.key = key
        self.visited = True
        self.prev: _Node | None = None
        self.next: _Node | None = None


class _FifoOrder:
    def __init__(self) -> None:
        self.keys: dict[str, None] = {}

    def insert(self, key: str) -> None:
        self.keys[key] = None

    def touch(self, key: str) -> None:
        pass

    def remove(self, key: str) -> None:
        self.keys.pop(key, None)

    def victim(self) -> str:
        return next(iter(self.keys))


class _SieveOrder:
    """``head`` is the front (newest); ``next`` points toward the tail, ``prev`` toward the front."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.head: _Node | None = None
        self.tail: _Node | None = None
        self.hand: _Node | None = None

    def insert(self, key: str) -> None:
        node = _Node(key)
        node.next = self.head
        if self.head is not None:
            self.head.prev = node
        self.head = node
        if self.tail is None:
            self.tail = node
        self.nodes[key] = node

    def touch(self, key: str) -> None:
        node = self.nodes.get(key)
        if node is not None:
            node.visited = True

    def remove(self, key: str) -> None:
        node = self.nodes.pop(key, None)
        if node is None:
            return
        if self.hand is node:
            self.hand = node.prev
        if node.prev is not None:
            node.prev.next = node.next
        else:
            self.head = node.next
        if node.next is not None:
            node.next.prev = node.prev
        else:
            self.tail = node.prev

    def victim(self) -> str:
        node = self.hand or self.tail
        while node.visited:
            node.visited = False
            node = node.prev or self.tail
        self.hand = node.prev
        return node.key

    def order(self) -> list[tuple[str, bool]]:
        out, node = [], self.head
        while node is not None:
            out.append((node.key, node.visited))
            node = node.next
        return out


class EndpointStore:
    def __init__(self, capacity: int, kind: str = SIEVE):
        if capacity < 1:
            raise ValueError(f"endpoint store capacity must be >= 1, got {capacity}")
        kind = kind.upper()
        if kind not in (FIFO, SIEVE):
            raise ValueError(f"MC_ENDPOINT_STORE_TYPE must be FIFO or SIEVE, got {kind!r}")
        self.kind = kind
        self.capacity = capacity
        self.map: dict[str, Endpoint] = {}
        self.order = _SieveOrder() if kind == SIEVE else _FifoOrder()
        self.waiting: list[Endpoint] = []
        self.lock = threading.RLock()
        self.on_evict: Callable[[Endpoint], None] = self.retire_evicted
        self.retire_log: list[tuple[str, str, int]] = []
        self.clock = None
        self.everything: list[Endpoint] | None = None
        """When a list, every endpoint ever inserted is appended (for the invariant checker)."""

    def get(self, path: str) -> Endpoint | None:
        ep = self.map.get(path)
        if ep is not None:
            self.order.touch(path)
        return ep

    def insert(self, path: str, factory: Callable[[], Endpoint | None]) -> Endpoint | None:
        with self.lock:
            ep = self.map.get(path)
            if ep is not None:
                self.order.touch(path)
                return ep
            ep = factory()
            if ep is None:
                return None
            while len(self.map) >= self.capacity:
                victim = self.map.get(self.order.victim())
                if victim is None:
                    break
                self.on_evict(victim)
                if victim.in_map:
                    self.remove(victim)
            self.map[path] = ep
            self.order.insert(path)
            ep.in_map = True
            if self.everything is not None:
                self.everything.append(ep)
            return ep

    def remove(self, ep: Endpoint) -> bool:
        """Take ``ep`` out of the active map if it is still the one there (pointer identity)."""
        with self.lock:
            if self.map.get(ep.peer_nic_path) is not ep:
                ep.in_map = False
                return False
            del self.map[ep.peer_nic_path]
            self.order.remove(ep.peer_nic_path)
            ep.in_map = False
            return True

    # ------------------------------------------------------------------ the one retire path
    def retire(self, ep: Endpoint, cause: str) -> bool:
        """Retire ``ep``: out of the map, never posted again, QPs flushed, destroyed on reclaim.

        Idempotent per endpoint generation: retiring an already retired endpoint does nothing.
        """
        with self.lock:
            if ep.retired:
                return False
            self.remove(ep)
            ep.begin_destroy(self.clock.now())
            self.waiting.append(ep)
            self.retire_log.append((cause, ep.peer_nic_path, ep.generation))
        log.info("endpoint %s generation %d retired (%s)", ep.peer_nic_path, ep.generation, cause)
        return True

    def retire_evicted(self, ep: Endpoint) -> None:
        self.retire(ep, "eviction")

    def reclaim(self, now: float, timeout: float | None, on_force: Callable[[Endpoint], None]) -> int:
        """Destroy drained waiting endpoints; with ``timeout``, also those waiting longer."""
        with self.lock:
            if not self.waiting:
                return 0
            keep, done = [], []
            for ep in self.waiting:
                if ep.drained():
                    done.append(ep)
                elif timeout is not None and now - ep.inactive_since >= timeout:
                    on_force(ep)
                    done.append(ep)
                else:
                    keep.append(ep)
            self.waiting = keep
        for ep in done:
            ep.destroy_qps()
        return len(done)

    def next_deadline(self, timeout: float) -> float | None:
        with self.lock:
            pending = [ep.inactive_since for ep in self.waiting if not ep.drained()]
        return min(pending) + timeout if pending else None

    def reclaimable(self, now: float, timeout: float) -> bool:
        for ep in self.waiting:
            if ep.drained() or now - ep.inactive_since >= timeout:
                return True
        return False

    def total_qp_number(self) -> int:
        """QPs this store accounts for, with Mooncake's inconsistency kept: FIFO counts the live
        map only, SIEVE counts the live map plus the waiting list."""
        with self.lock:
            eps = list(self.map.values())
            if self.kind == SIEVE:
                eps += self.waiting
            return sum(len(ep.qps) for ep in eps)

    def endpoints(self) -> list[Endpoint]:
        with self.lock:
            return list(self.map.values())
