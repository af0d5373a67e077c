"""Per peer-NIC-path rail health, as Mooncake's WorkerPool keeps it.

An error more than ``reset_after`` seconds after the previous one starts the count again;
``threshold`` errors (or one immediate error) pause the rail for ``pause_seconds``; an expired
pause resets the rail.

The worker pool pauses a rail only when the failed slice has another rail to take: a failed
handshake or a remote error completion pauses the peer path at once if an alternative is
available, and charges nothing otherwise (Mooncake's WorkerPool since 0.3.12: "no alternate
peer RNIC is available; retrying without pausing peer rail"). Counting those failures on a
peer's only path would pause it after ``threshold`` recovered ones, within ``reset_after``
seconds of each other, and fail the next failure's retry with its budget left (MR-12).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class RailState:
    __slots__ = ("error_count", "pause_until", "last_error")

    def __init__(self) -> None:
        self.error_count = 0
        self.pause_until = 0.0
        self.last_error = 0.0


class RailTable:
    def __init__(self, clock, pause_seconds: float = 30.0, threshold: int = 5,
                 reset_after: float = 5.0):
        self.clock = clock
        self.pause_seconds = pause_seconds
        self.threshold = threshold
        self.reset_after = reset_after
        self.rails: dict[str, RailState] = {}
        self.lock = threading.Lock()

    def mark_failed(self, path: str, immediate: bool = False) -> None:
        now = self.clock.now()
        with self.lock:
            rail = self.rails.setdefault(path, RailState())
            if rail.last_error and now - rail.last_error > self.reset_after:
                rail.error_count = 0
            rail.error_count += 1
            if immediate:
                rail.error_count = max(rail.error_count, self.threshold)
            rail.last_error = now
            if rail.error_count >= self.threshold:
                rail.pause_until = now + self.pause_seconds

    def available(self, path: str) -> bool:
        rail = self.rails.get(path)
        if rail is None or not rail.pause_until:
            return True
        if self.clock.now() >= rail.pause_until:
            with self.lock:
                rail.error_count = 0
                rail.pause_until = 0.0
            return True
        return False

    def clear(self, paths: Iterable[str]) -> None:
        with self.lock:
            for p in paths:
                self.rails.pop(p, None)
