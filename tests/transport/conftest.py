"""Real loopback sockets: a reference TCP transport with one registered buffer, and raw clients."""

from __future__ import annotations

import socket

import pytest
from rawsock import BASE, SIZE

from reference_engine.transport import TcpTransport


class Peer:
    def __init__(self, transport: TcpTransport, memory: bytearray, base: int) -> None:
        self.t = transport
        self.mem = memory
        self.base = base
        self.host = "127.0.0.1"
        self.port = transport.data_port


@pytest.fixture
def server_peer():
    t = TcpTransport(io_timeout=10.0)
    mem = bytearray(SIZE)
    t.register_buffer(BASE, memoryview(mem))
    t.start()
    yield Peer(t, mem, BASE)
    t.stop()


@pytest.fixture
def client():
    t = TcpTransport(io_timeout=10.0)
    yield t
    t.stop()


@pytest.fixture
def raw(server_peer):
    """Open raw sockets to the server; all closed at teardown."""
    socks = []

    def connect() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", server_peer.port), timeout=5)
        socks.append(s)
        return s

    yield connect
    for s in socks:
        s.close()


@pytest.fixture
def fake_peer():
    """A scripted peer: ``start(handler)`` serves each accepted connection with handler(sock)."""
    import threading

    listeners, threads = [], []

    def start(handler, rcvbuf: int | None = None) -> int:
        lst = socket.socket()
        if rcvbuf:
            lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        lst.settimeout(10)
        listeners.append(lst)

        def serve():
            try:
                while True:
                    conn, _ = lst.accept()
                    with conn:
                        conn.settimeout(10)
                        handler(conn)
            except OSError:
                return

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        threads.append(t)
        return lst.getsockname()[1]

    yield start
    for lst in listeners:
        try:
            lst.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        lst.close()
    for t in threads:
        t.join(10)
