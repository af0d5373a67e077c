"""The reference engine's TCP transport: Mooncake's TCP wire protocol, both directions.

Contract used by the engine process::

    t = TcpTransport(bind_host="127.0.0.1", port=0)
    t.register_buffer(addr, memoryview(buf))   # wire address -> writable memory
    port = t.start()                           # publish as tcp_data_port, tcp_proto_version 2
    t.write(host, port, remote_addr, data)
    data = t.read(host, port, remote_addr, length)
    t.read_into(host, port, remote_addr, dest)          # zero-copy into a local buffer
    t.write_batch(host, port, [(remote_addr, data), ...])
    t.read_batch(host, port, [(remote_addr, length), ...]) -> list[bytes]
    t.read_batch_into(host, port, [(remote_addr, dest), ...])
    t.drop_peer(host, port)                    # after the peer was replaced
    t.stop()

Every client call takes ``proto_version`` (default 2; pass the peer descriptor's
``tcp_proto_version``, which Mooncake treats as 1 when absent). Failures raise
:class:`PeerRejectedError` (the peer refused the range: outside its registered buffers) or
:class:`TransferConnectionError` (connect/send/receive failed, or the peer closed before
answering; :class:`ProtocolError` is the subclass for an answer that is not a status frame).
Batch calls raise one of them with ``.failures`` (index -> error) and ``.completed``; the
exception class is :class:`PeerRejectedError` only when every failed item was rejected.
Zero-length transfers complete without a round trip, as in Mooncake. A batch is pipelined over
one connection, or split over ``lanes`` (default 2) connections when it is big and, for WRITEs,
its remote ranges are disjoint (overlapping WRITEs of one batch apply in order).

Server side: a request is checked against the registered buffers when its header arrives;
one already past that check when ``unregister_buffer`` runs still completes on that memory (the
view keeps it alive). ``limits`` bound the peers' connections (``reference_engine.hub``): a
connection that receives nothing for ``recv_timeout`` seconds is closed, idle or mid-request;
an idle connection holds no thread and no buffer; at ``max_connections`` the longest-idle one
makes room, and a new peer is refused only when all are busy. ``server_stats()`` counts
connections, reads, writes, bytes, rejected, malformed, refused, evicted and timed out.

Connections that failed, or were opened before ``drop_peer``, are never reused, and a failed
request is never silently replayed on a new connection (except the requests behind a rejected
one, which the peer provably did not execute): after a replacement, a request must not reach the
new process through a retry the caller did not ask for.
"""

from __future__ import annotations

from reference_engine.hub import BINARY_LIMITS, Limits

from . import wire
from .buffers import RegisteredBuffers
from .pool import ConnectionPool
from .server import ServerStats, TcpServer
from .tcp_client import TcpClient
from .transfer_errors import (
    PeerRejectedError,
    ProtocolError,
    TransferConnectionError,
    TransferError,
)

__all__ = [
    "TcpTransport",
    "TransferError",
    "PeerRejectedError",
    "TransferConnectionError",
    "ProtocolError",
    "ServerStats",
    "PROTO_VERSION",
]

PROTO_VERSION = wire.PROTO_V2


class TcpTransport:
    def __init__(
        self,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        *,
        connect_timeout: float = 5.0,
        io_timeout: float = 30.0,
        window: int = 256,
        lanes: int = 2,
        limits: Limits = BINARY_LIMITS,
    ) -> None:
        self.buffers = RegisteredBuffers()
        self.server = TcpServer(self.buffers, bind_host, port, limits)
        self.pool = ConnectionPool(connect_timeout=connect_timeout, io_timeout=io_timeout)
        self.client = TcpClient(self.pool, window=window, lanes=lanes)
        self.bind_host = bind_host

    # server side -----------------------------------------------------------------------------

    def register_buffer(self, addr: int, view) -> None:
        self.buffers.register(addr, view)

    def unregister_buffer(self, addr: int) -> None:
        self.buffers.unregister(addr)

    def start(self) -> int:
        return self.server.start()

    @property
    def data_port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        self.server.stop()
        self.client.close()
        self.pool.close_all()

    def server_stats(self) -> ServerStats:
        return self.server.stats()

    def __enter__(self) -> TcpTransport:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # client side -----------------------------------------------------------------------------

    def write(
        self, host: str, port: int, remote_addr: int, data, *, proto_version: int = 2
    ) -> None:
        self.client.write(host, port, remote_addr, data, proto_version)

    def read_into(
        self, host: str, port: int, remote_addr: int, dest, *, proto_version: int = 2
    ) -> None:
        self.client.read_into(host, port, remote_addr, dest, proto_version)

    def read(
        self, host: str, port: int, remote_addr: int, length: int, *, proto_version: int = 2
    ) -> bytes:
        return self.client.read(host, port, remote_addr, length, proto_version)

    def write_batch(self, host: str, port: int, items, *, proto_version: int = 2) -> None:
        self.client.write_batch(host, port, items, proto_version)

    def read_batch_into(self, host: str, port: int, items, *, proto_version: int = 2) -> None:
        self.client.read_batch_into(host, port, items, proto_version)

    def read_batch(self, host: str, port: int, items, *, proto_version: int = 2) -> list[bytes]:
        dests = [bytearray(length) for _, length in items]
        self.client.read_batch_into(
            host,
            port,
            [(addr, d) for (addr, _), d in zip(items, dests, strict=True)],
            proto_version,
        )
        return [bytes(d) for d in dests]

    def drop_peer(self, host: str, port: int) -> int:
        return self.pool.drop_peer(host, port)
