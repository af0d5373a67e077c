"""Mooncake's handshake RPC framing, client side only: what a P2P deployment asks a peer.

Written from Mooncake's transfer-engine sources and checked against the releases' engines,
independently of the reference engine's codec (the harness observes every target with its own
client, so a framing bug of the reference cannot hide in both). A frame is an 8-byte
little-endian length, one type byte and JSON text; the length counts the type byte. The peer
answers one request with a frame of the same type and closes.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

METADATA = 1
"""The P2P handshake's descriptor exchange (the other types: 0 Connection, 2 Notify, 3 Probe)."""
MAX_REPLY = 1 << 20
_LEN = struct.Struct("<Q")


class HandshakeFrameError(OSError):
    """The exchange failed: connect, timeout, a short or malformed frame, a type mismatch."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HandshakeFrameError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def exchange(address: tuple[str, int], kind: int, payload: Any, timeout: float) -> Any:
    """Send one ``kind`` frame to ``address`` and return the JSON of its answer."""
    body = bytes([kind]) + json.dumps(payload).encode()
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_LEN.pack(len(body)) + body)
            (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
            if not 0 < length <= MAX_REPLY:
                raise HandshakeFrameError(f"reply length {length} outside 1..{MAX_REPLY}")
            reply = _recv_exact(sock, length)
    except HandshakeFrameError:
        raise
    except OSError as exc:
        raise HandshakeFrameError(f"handshake with {address[0]}:{address[1]} failed: {exc}") from exc
    if reply[0] != kind:
        raise HandshakeFrameError(f"reply type {reply[0]} does not match request type {kind}")
    try:
        return json.loads(reply[1:])
    except ValueError as exc:
        raise HandshakeFrameError(f"malformed JSON in the reply: {exc}") from None
