"""Pooled client connections to peers' TCP data ports, keyed by (host, port).

A connection is handed to one caller at a time. ``drop_peer`` closes the idle connections to a
peer and makes the busy ones close when they come back: after a peer is replaced, no request
may travel on a connection that was opened to its predecessor. An idle connection is not handed
out again once the peer closed it (servers drop idle peers: ours after its receive timeout) or
after ``max_idle`` seconds, less than our servers' default receive timeout, so a request does
not meet a connection the server is closing at that moment. ``open_by_endpoint`` counts the
connections the pool ever opened that are not closed yet, wherever they are now (idle, in a
caller's hands, or dropped by everyone but not closed): the engine's leak counters (MR-16).
"""

from __future__ import annotations

import collections
import socket
import threading
import time
import weakref

from reference_engine.hub import readable_within

from .sockio import set_kernel_timeouts
from .transfer_errors import TransferConnectionError

Key = tuple[str, int]


class Connection:
    __slots__ = ("sock", "key", "generation", "idle_since")

    def __init__(self, sock: socket.socket, key: Key, generation: tuple[int, int]) -> None:
        self.sock = sock
        self.key = key
        self.generation = generation
        self.idle_since = 0.0

    def reusable(self, max_idle: float) -> bool:
        """Idle for less than ``max_idle`` and still open at the peer's end: an idle
        connection has nothing to read, so readable means EOF (or a reset)."""
        if time.monotonic() - self.idle_since >= max_idle:
            return False
        try:
            return not readable_within(self.sock, 0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class ConnectionPool:
    def __init__(
        self,
        connect_timeout: float = 5.0,
        io_timeout: float = 30.0,
        max_idle_per_peer: int = 8,
        max_idle: float = 300.0,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.max_idle_per_peer = max_idle_per_peer
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: dict[Key, list[Connection]] = {}
        self._generation: dict[Key, int] = {}
        self._epoch = 0
        self.opened = 0
        self._opened_sockets: weakref.WeakKeyDictionary[socket.socket, Key] = (
            weakref.WeakKeyDictionary())

    def _current(self, key: Key) -> tuple[int, int]:
        return (self._epoch, self._generation.get(key, 0))

    def acquire(self, host: str, port: int) -> Connection:
        key = (host, port)
        stale = []
        with self._lock:
            idle = self._idle.get(key)
            while idle:
                conn = idle.pop()
                if conn.reusable(self.max_idle):
                    break
                stale.append(conn)
            else:
                conn = None
            generation = self._current(key)
        for old in stale:
            old.close()
        if conn is not None:
            return conn
        try:
            sock = socket.create_connection(key, timeout=self.connect_timeout)
        except OSError as e:
            raise TransferConnectionError(
                f"cannot connect to {host}:{port}: {e}", host=host, port=port
            ) from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_kernel_timeouts(sock, self.io_timeout)
        with self._lock:
            self.opened += 1
            self._opened_sockets[sock] = key
        return Connection(sock, key, generation)

    def open_by_endpoint(self) -> collections.Counter[Key]:
        """(host, port) -> how many connections opened to it are not closed yet (a socket a
        dead peer reset still holds its fd until closed, so it counts)."""
        with self._lock:
            items = list(self._opened_sockets.items())
        return collections.Counter(key for sock, key in items if sock.fileno() != -1)

    def release(self, conn: Connection, healthy: bool) -> None:
        with self._lock:
            if healthy and conn.generation == self._current(conn.key):
                idle = self._idle.setdefault(conn.key, [])
                if len(idle) < self.max_idle_per_peer:
                    conn.idle_since = time.monotonic()
                    idle.append(conn)
                    return
        conn.close()

    def drop_peer(self, host: str, port: int) -> int:
        """Close every connection to the peer; return how many idle ones were closed."""
        key = (host, port)
        with self._lock:
            self._generation[key] = self._generation.get(key, 0) + 1
            idle = self._idle.pop(key, [])
        for conn in idle:
            conn.close()
        return len(idle)

    def idle_count(self, host: str, port: int) -> int:
        with self._lock:
            return len(self._idle.get((host, port), ()))

    def close_all(self) -> None:
        with self._lock:
            self._epoch += 1
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()
