"""The connection hub under the servers: parking, the receive timeout, the connection limit, stop."""

from __future__ import annotations

import socket
import time

import pytest

from pytest_mooncake.raw_peers import closed_by_server
from pytest_mooncake.waits import wait_until
from reference_engine.hub import ConnectionHub, Limits, readable_within
from reference_engine.metadata.http_server import MetadataHttpServer


class EchoSession:
    """Echoes lines; parks when the peer is quiet at a line boundary."""

    activations = 0

    def __init__(self, sock: socket.socket, peer: tuple, linger: float):
        self.sock = sock
        self.linger = linger
        self.idle_since = time.monotonic()
        self.pending = b""

    def serve(self) -> bool:
        EchoSession.activations += 1
        while True:
            if b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                self.idle_since = time.monotonic()
                self.sock.sendall(line + b"\n")
                continue
            if not self.pending and not readable_within(self.sock, self.linger):
                return True
            try:
                chunk = self.sock.recv(4096)
            except BlockingIOError:  # the receive timeout, mid-line
                return False
            if not chunk:
                return False
            self.pending += chunk

    def closed(self) -> None:
        pass


@pytest.fixture
def hub():
    made = []

    def make(recv_timeout: float = 30.0, max_connections: int = 64) -> ConnectionHub:
        limits = Limits(recv_timeout, max_connections, linger=0.05)
        h = ConnectionHub("echo", "127.0.0.1", 0, limits,
                          lambda s, p: EchoSession(s, p, limits.linger))
        h.start()
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def _connect(h: ConnectionHub) -> socket.socket:
    return socket.create_connection(("127.0.0.1", h.port), timeout=10)


def _echo(s: socket.socket, text: bytes) -> bytes:
    s.sendall(text + b"\n")
    got = b""
    while not got.endswith(b"\n"):
        chunk = s.recv(100)
        assert chunk, "closed instead of echoing"
        got += chunk
    return got[:-1]


def test_a_quiet_connection_is_parked_and_served_again_by_the_same_session(hub):
    h = hub()
    s = _connect(h)
    assert _echo(s, b"one") == b"one"
    wait_until(lambda: h.stats().active == 0, 10, "the connection to be parked")
    before = EchoSession.activations
    assert _echo(s, b"two") == b"two"
    assert EchoSession.activations == before + 1
    assert h.stats().open == 1
    s.close()


def test_at_the_limit_the_longest_idle_makes_room_and_busy_ones_refuse(hub):
    h = hub(max_connections=2)
    first, second = _connect(h), _connect(h)
    assert _echo(first, b"a") == b"a"
    assert _echo(second, b"b") == b"b"  # the second is idle for less time
    wait_until(lambda: h.stats().active == 0, 10, "both parked")
    third = _connect(h)
    assert _echo(third, b"c") == b"c"
    wait_until(lambda: closed_by_server(first), 10, "the longest-idle connection to be closed")
    assert _echo(second, b"still") == b"still"
    second.sendall(b"mid-line")  # busy: both open connections are mid-request now
    third.sendall(b"mid-line")
    wait_until(lambda: h.stats().active == 2, 10, "both busy")
    fourth = _connect(h)
    wait_until(lambda: closed_by_server(fourth), 10, "the new peer to be refused")
    assert (h.stats().evicted, h.stats().refused) == (1, 1)
    for s in (first, second, third, fourth):
        s.close()


def test_idle_and_stalled_connections_close_at_the_receive_timeout(hub):
    h = hub(recv_timeout=0.3)
    idle, stalled = _connect(h), _connect(h)
    stalled.sendall(b"no newline ever")
    wait_until(lambda: closed_by_server(idle) and closed_by_server(stalled), 10,
               "both closed after the 0.3 s receive timeout")
    assert h.stats().idle_closed == 1 and h.stats().open == 0
    fresh = _connect(h)
    assert _echo(fresh, b"served") == b"served"
    fresh.close()


def test_stop_closes_every_connection_and_the_listener(hub):
    h = hub()
    parked, busy = _connect(h), _connect(h)
    busy.sendall(b"mid-line")
    wait_until(lambda: h.stats().active == 1, 10, "one busy")
    h.stop()
    assert closed_by_server(parked) and closed_by_server(busy)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", h.port), timeout=2)
    parked.close()
    busy.close()


def test_pipelined_http_requests_in_one_packet_are_all_answered():
    server = MetadataHttpServer().start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
            got = b""
            while got.count(b"HTTP/1.1 200") < 3:
                chunk = s.recv(4096)
                assert chunk, f"closed after {got!r}"
                got += chunk
    finally:
        server.stop()
