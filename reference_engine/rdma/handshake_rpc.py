"""The handshake RPC as Mooncake frames it, over TCP on loopback.

Frame: 8-byte length in host byte order (little-endian here), one type byte, JSON text; the
length counts the type byte. Types: 0 Connection (QP handshake), 1 Metadata (P2P handshake
mode's descriptor exchange, served when ``on_metadata`` is given), 2 Notify, 3 Probe. The server
handles one connection at a time, reads one request, answers with the same type and closes.
Malformed frames (length 0 or over the limit, unknown type, bad JSON) are answered with nothing
and the connection is closed; the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("reference_engine.rdma.handshake")

CONNECTION = 0
METADATA = 1
NOTIFY = 2
PROBE = 3
MAX_LENGTH = 1 << 20
_LEN = struct.Struct("<Q")


class HandshakeError(OSError):
    """The handshake RPC failed (connect, timeout, framing, type or JSON)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(65536, n - got))
        if not chunk:
            raise HandshakeError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, max_length: int = MAX_LENGTH) -> tuple[int, Any]:
    (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if length == 0 or length > max_length:
        raise HandshakeError(f"frame length {length} outside 1..{max_length}")
    body = _recv_exact(sock, length)
    kind = body[0]
    if kind not in (CONNECTION, METADATA, NOTIFY, PROBE):
        raise HandshakeError(f"unknown frame type {kind}")
    try:
        return kind, json.loads(body[1:])
    except ValueError as exc:
        raise HandshakeError(f"malformed JSON in frame type {kind}: {exc}") from None


def write_frame(sock: socket.socket, kind: int, payload: Any) -> None:
    body = bytes([kind]) + json.dumps(payload, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(body)) + body)


class HandshakeServer:
    """Serves Connection requests with ``on_connection(request) -> reply``; Probe and Notify too."""

    def __init__(self, on_connection: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                 host: str = "127.0.0.1", port: int = 0, recv_timeout: float = 5.0,
                 on_metadata: Callable[[Mapping[str, Any]], Any] | None = None):
        self.on_connection = on_connection
        self.on_metadata = on_metadata
        """Metadata requests (type 1): ``on_metadata(request) -> reply`` (our descriptor)."""
        self.recv_timeout = recv_timeout
        self.notifies: list[dict[str, Any]] = []
        self.rejected = 0
        self._sock = socket.create_server((host, port), backlog=128)
        self._sock.settimeout(0.2)
        self.address = self._sock.getsockname()[:2]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"handshake:{self.address[1]}",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(self.recv_timeout)
                try:
                    kind, request = read_frame(conn)
                    write_frame(conn, kind, self._answer(kind, request))
                    conn.shutdown(socket.SHUT_WR)
                except (OSError, ValueError) as exc:
                    self.rejected += 1
                    log.warning("handshake request rejected: %s", exc)

    def _answer(self, kind: int, request: Any) -> Any:
        if kind == PROBE:
            return {"status": "success"}
        if kind == NOTIFY:
            self.notifies.append(request)
            return {"name": "", "notify_msg": "success"}
        if not isinstance(request, dict):
            return {"reply_msg": "handshake request is not a JSON object"}
        if kind == METADATA:
            if self.on_metadata is None:
                return {"reply_msg": "metadata exchange is not served here"}
            try:
                return self.on_metadata(request)
            except Exception as exc:  # noqa: BLE001 - the daemon answers, it never dies
                log.warning("metadata request failed: %s", exc)
                return None
        try:
            return dict(self.on_connection(request))
        except Exception as exc:  # noqa: BLE001 - the daemon answers, it never dies
            return {"reply_msg": f"Handshake callback failed: {exc}"}

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout)


def send(address: tuple[str, int], kind: int, payload: Any, connect_timeout: float = 5.0,
         recv_timeout: float = 60.0) -> Any:
    try:
        with socket.create_connection(address, timeout=connect_timeout) as sock:
            sock.settimeout(recv_timeout)
            write_frame(sock, kind, payload)
            reply_kind, reply = read_frame(sock)
    except OSError as exc:
        raise HandshakeError(f"handshake with {address[0]}:{address[1]} failed: {exc}") from exc
    if reply_kind != kind:
        raise HandshakeError(f"reply type {reply_kind} does not match request type {kind}")
    return reply


def tcp_rpc(resolve: Callable[[str], tuple[str, int] | None], **timeouts: float):
    """An ``Rpc`` for endpoints: resolve the peer server name to its handshake address."""
    def rpc(server: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
        address = resolve(server)
        if address is None:
            raise HandshakeError(f"no handshake address known for {server!r}")
        reply = send(address, CONNECTION, dict(request), **timeouts)
        if not isinstance(reply, dict):
            raise HandshakeError("handshake reply is not a JSON object")
        return reply
    return rpc
