"""A peer that speaks raw bytes to a server: sends, optionally half-closes, reads until the server
closes, and never waits without a deadline.

For conformance and hardening tests that must see exactly what a server does with unusual input
(a request followed by a half-close, garbage, a body that never comes), where a protocol client
would hide it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from pytest_mooncake import tcp_wire
from pytest_mooncake.targets.base import TargetLacks

DEADLINE = 10.0
"""Seconds a server gets to answer and close after the input was sent."""
MAX_REPLY = 16 << 20


class PeerHung(AssertionError):
    """The server neither answered completely nor closed before the deadline."""


@dataclass(frozen=True)
class Reply:
    data: bytes
    """Everything the server sent before it closed."""
    end: str
    """How the connection ended: ``eof`` (the server closed) or ``reset``."""


def exchange(address: tuple[str, int], payload: bytes, *, half_close: bool = True,
             deadline: float = DEADLINE, max_reply: int = MAX_REPLY) -> Reply:
    """Connect, send ``payload`` (then shut down our sending side if ``half_close``) and read
    until the server closes. ``PeerHung`` if it has not closed within ``deadline`` seconds."""
    end_at = time.monotonic() + deadline
    sock = socket.create_connection(address, timeout=deadline)
    try:
        try:
            sock.sendall(payload)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed early; what it sent first is still readable
        return read_until_closed(sock, end_at, max_reply, payload)
    finally:
        sock.close()


def read_until_closed(sock: socket.socket, end_at: float, max_reply: int = MAX_REPLY,
                      sent: bytes = b"") -> Reply:
    """Read until EOF or reset, giving up with ``PeerHung`` at ``end_at`` (``time.monotonic()``)."""
    data = bytearray()
    while True:
        left = end_at - time.monotonic()
        if left <= 0:
            raise PeerHung(f"the server neither closed nor finished answering within the "
                           f"deadline after {len(sent)} bytes ({bytes(sent[:48])!r}...); it sent "
                           f"{len(data)} bytes: {bytes(data[:48])!r}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(65536, max_reply + 1 - len(data)))
        except ConnectionResetError:
            return Reply(bytes(data), "reset")
        except TimeoutError:
            continue
        if not chunk:
            return Reply(bytes(data), "eof")
        data += chunk
        if len(data) > max_reply:
            raise AssertionError(f"the server sent more than {max_reply} bytes")


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed (or reset) a connection we keep open, without blocking;
    what it sent before closing (a last reply) is read and discarded."""
    try:
        while sock.recv(65536, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def data_port_of(engine: Any) -> tuple[tuple[str, int], int]:
    """(host, port) of ``engine``'s TCP data port and the framing version it publishes, read from
    its descriptor; ``TargetLacks`` (engine) where it publishes no TCP data port (an RDMA-only
    descriptor): there is no wire to send raw requests on."""
    desc = engine.descriptor()
    endpoint = tcp_wire.data_endpoint(desc)
    if endpoint is None:
        raise TargetLacks("engine", f"{engine.segment} publishes no TCP data port (protocol "
                                    f"{desc.get('protocol')!r}): no wire to send raw requests on")
    return endpoint, tcp_wire.proto_version(desc)
