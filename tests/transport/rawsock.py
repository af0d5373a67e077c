"""Raw-socket helpers and the address layout shared by the transport tests."""

from __future__ import annotations

import socket

BASE = 0x7F00_0000_0000
SIZE = 4 << 20


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Up to n bytes; fewer only if the peer closed."""
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def recv_until_eof(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    out = bytearray()
    while len(out) < limit:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)
