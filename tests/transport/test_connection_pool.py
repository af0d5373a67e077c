"""The data-path connection pool on real loopback sockets: what it hands out again and what it
closes (the engine's connection-leak counters, MR-16, read ``open_by_endpoint``)."""

from __future__ import annotations

import socket
import struct

import pytest

from reference_engine.transport.pool import ConnectionPool


class Peer:
    """A loopback listener standing for a peer's data port; every connection it accepted is
    closed with it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(5.0)
        self.accepted: list[socket.socket] = []

    def getsockname(self) -> tuple[str, int]:
        return self.server.getsockname()

    def accept(self) -> tuple[socket.socket, object]:
        sock, address = self.server.accept()
        self.accepted.append(sock)
        return sock, address

    def close(self) -> None:
        for sock in self.accepted:
            sock.close()
        self.server.close()


@pytest.fixture
def listener():
    peer = Peer()
    yield peer
    peer.close()


def test_an_idle_connection_the_peer_closed_is_closed_and_replaced(listener):
    host, port = listener.getsockname()
    pool = ConnectionPool()
    first = pool.acquire(host, port)
    accepted, _ = listener.accept()
    pool.release(first, healthy=True)
    accepted.close()  # the peer drops the idle connection (a server's receive timeout)
    second = pool.acquire(host, port)
    try:
        assert second is not first and second.sock is not first.sock
        assert first.sock.fileno() == -1, "the dead idle connection was left open"
        assert pool.open_by_endpoint() == {(host, port): 1}
    finally:
        second.close()


def test_a_live_idle_connection_is_handed_out_again(listener):
    host, port = listener.getsockname()
    pool = ConnectionPool()
    first = pool.acquire(host, port)
    listener.accept()
    try:
        pool.release(first, healthy=True)
        assert pool.acquire(host, port) is first
        assert pool.open_by_endpoint() == {(host, port): 1}
    finally:
        first.close()


def test_pooled_connections_send_small_frames_at_once_and_wait_io_timeout_in_the_kernel(
        listener):
    host, port = listener.getsockname()
    pool = ConnectionPool(io_timeout=7.0)
    conn = pool.acquire(host, port)
    listener.accept()
    try:
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert conn.sock.gettimeout() is None  # blocking: the kernel's timeouts apply
        for option in (socket.SO_SNDTIMEO, socket.SO_RCVTIMEO):
            seconds, micros = struct.unpack("ll", conn.sock.getsockopt(
                socket.SOL_SOCKET, option, struct.calcsize("ll")))
            assert (seconds, micros) == (7, 0)
    finally:
        conn.close()


def test_dropping_a_peer_closes_its_idle_connections_and_those_in_use_when_they_come_back(
        listener):
    """After a peer is replaced no request may travel on a connection opened to its
    predecessor: drop_peer closes the idle ones at once and a busy one when it is released,
    even as healthy (MR-9: every endpoint of the old instance retired)."""
    host, port = listener.getsockname()
    pool = ConnectionPool()
    idle, busy = pool.acquire(host, port), pool.acquire(host, port)
    listener.accept(), listener.accept()
    pool.release(idle, healthy=True)
    assert pool.drop_peer(host, port) == 1
    assert idle.sock.fileno() == -1, "an idle connection to the dropped peer stayed open"
    pool.release(busy, healthy=True)
    assert busy.sock.fileno() == -1, "a connection in use when the peer was dropped was pooled"
    assert pool.idle_count(host, port) == 0 and pool.open_by_endpoint() == {}
    again = pool.acquire(host, port)  # a new connection, pooled as usual
    listener.accept()
    try:
        assert again is not busy and again is not idle
    finally:
        again.close()
