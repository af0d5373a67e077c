"""Connections this process holds open, for the engine's leak counters (MR-16).

Client side: ``ConnectionTracker`` remembers (weakly) the socket of every connection the
transport's pool hands out, and counts those still open, per remote endpoint, whether they sit
in the pool, in a caller's hands or in no list at all. A socket counts until it is closed,
whatever its TCP state: a connection reset by a dead peer leaves the kernel's tables but still
holds a file descriptor.

Server side: ``own_tcp_sockets`` reads the TCP sockets this process holds an fd of from Linux
``/proc`` (sessions accepted on the data port).
"""

from __future__ import annotations

import collections
import ipaddress
import os
import threading
import weakref
from typing import NamedTuple

LISTEN = 0x0A


class TcpSocket(NamedTuple):
    local: tuple[str, int]
    remote: tuple[str, int]
    state: int


def _addr(field: str) -> tuple[str, int]:
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    # /proc prints the address as 32-bit words in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def _own_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def own_tcp_sockets() -> list[TcpSocket] | None:
    """Every TCP socket this process holds; None where the kernel does not tell (no /proc)."""
    try:
        inodes = _own_inodes()
    except OSError:
        return None
    out = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                out.append(TcpSocket(_addr(cols[1]), _addr(cols[2]), int(cols[3], 16)))
    return out


class ConnectionTracker:
    def __init__(self) -> None:
        self._sockets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.attached = False

    def attach(self, pool) -> bool:
        """Track every connection ``pool.acquire(host, port)`` returns (its ``sock`` and
        ``key``); False when the pool has no such method (nothing is tracked)."""
        acquire = getattr(pool, "acquire", None)
        if acquire is None:
            return False

        def tracked(host: str, port: int):
            conn = acquire(host, port)
            sock, key = getattr(conn, "sock", None), getattr(conn, "key", (host, port))
            if sock is not None:
                with self._lock:
                    self._sockets[sock] = tuple(key)
            return conn

        pool.acquire = tracked
        self.attached = True
        return True

    def open_by_endpoint(self) -> collections.Counter:
        """(host, port) -> how many connections to it are still open."""
        with self._lock:
            items = list(self._sockets.items())
        return collections.Counter(key for sock, key in items if sock.fileno() != -1)
