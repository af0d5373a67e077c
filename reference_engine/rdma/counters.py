"""Outstanding-work counters (QP depth, CQ outstanding) that remember their lowest and highest
values.

``low`` lets the invariant checker see a counter that went negative even if it came back;
``high``, one that counted more work outstanding than its queue holds (a send queue's
``max_wr``, a CQ's entries) even if it came back.
``take`` reserves up to ``n`` of a queue's ``limit`` entries in one step under the counter's
lock: a CQ is shared by the endpoints of every peer, posted by different workers, so its free
entries must be read and taken together (a read under an endpoint's lock lets two workers
take the same entries).
``SerialCounter`` is the same without the lock, for a transport whose actors all run on one
thread (the controlled scheduler), where the lock is pure cost on the hottest path.
"""

from __future__ import annotations

import threading


class Counter:
    __slots__ = ("value", "low", "high", "lock", "name")

    def __init__(self, name: str = ""):
        self.value = 0
        self.low = 0
        self.high = 0
        self.lock = threading.Lock()
        self.name = name

    def add(self, n: int) -> None:
        with self.lock:
            v = self.value + n
            self.value = v
            if v < self.low:
                self.low = v
            elif v > self.high:
                self.high = v

    def take(self, n: int, limit: int) -> int:
        """Add ``min(n, limit - value)`` (at least 0) and return it."""
        with self.lock:
            v = self.value
            n = min(n, limit - v)
            if n <= 0:
                return 0
            v += n
            self.value = v
            if v > self.high:
                self.high = v
            return n

    def __repr__(self) -> str:
        return f"Counter({self.name}={self.value}, low={self.low}, high={self.high})"


class SerialCounter(Counter):
    __slots__ = ()

    def add(self, n: int) -> None:
        v = self.value + n
        self.value = v
        if v < self.low:
            self.low = v
        elif v > self.high:
            self.high = v

    def take(self, n: int, limit: int) -> int:
        v = self.value
        n = min(n, limit - v)
        if n <= 0:
            return 0
        v += n
        self.value = v
        if v > self.high:
            self.high = v
        return n
