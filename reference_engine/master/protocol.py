"""The master's RPC protocol: length-prefixed JSON over TCP, opened by a version handshake.

Frame: 4-byte big-endian length, then that many bytes of UTF-8 JSON (at most ``MAX_FRAME``).
The client's first frame is ``{"op": "hello", "version": V, "client_id": C}``; the master
answers ``{"ok": true, "result": {"version": ..., "view_version": ...}}`` or an error and closes.
Then requests ``{"id": n, "op": NAME, "args": {...}}`` get ``{"id": n, "ok": bool,
"result"|"error"+"message"}``. Unknown fields are ignored in both directions.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from reference_engine import untrusted_json

MASTER_VERSION = "1.3.0"
"""The reference master's protocol version; compatible (rfc) with any 1.x client."""

MAX_FRAME = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """A frame that is not valid protocol (oversized, not JSON, not an object)."""


class ConnectionClosed(Exception):
    """The peer closed the connection (or it broke) mid-frame."""


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    sock.sendall(_HEADER.pack(len(data)) + data)


def recv_frame(sock: socket.socket) -> dict[str, Any]:
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if length > MAX_FRAME:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
    data = _recv_exact(sock, length)
    try:
        message = untrusted_json.loads(data, "frame")
    except untrusted_json.JsonRejected as exc:
        raise ProtocolError(str(exc)) from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionClosed("connection closed by peer")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
