"""Server side of the Mooncake TCP transport: serves peers' READs and WRITEs on registered memory.

Connections are accepted and held by a ``ConnectionHub``: an idle one is parked (no thread, no
buffer); one that has bytes to read gets a thread and a staging buffer until it goes quiet again.
Requests are parsed out of the staging buffer so that many small pipelined requests cost one
``recv``; large WRITE bodies are received straight into the destination and READ payloads are
sent straight from it (``sendmsg`` with memoryviews). Responses are gathered and sent before the
session waits on the socket again, and before any WRITE is applied while READ payloads are still
queued (so a READ never sees a later WRITE). A peer that half-closes its side after its last
request still gets every reply (as Mooncake's server, which answers a request before it reads
the next, does); then the connection is closed.

Safety: a request is validated against the registered buffers before a byte of its body is
applied; a range outside them (or of size 0) is answered with the rejection status (v2) and the
connection is closed, as Mooncake does. A malformed header (unknown opcode), a truncated stream
or a peer that sends nothing for the receive timeout mid-request closes the connection with one
log line. A WRITE body cut off by a dropped connection may leave the destination partly updated;
the initiator never got an acknowledgement for it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, fields

from reference_engine.hub import (
    BINARY_LIMITS,
    ConnectionHub,
    HubStats,
    Limits,
    readable_within,
)

from . import wire
from .buffers import RegisteredBuffers
from .sockio import send_all

log = logging.getLogger("reference_engine.transport.tcp.server")

STAGING_SIZE = 256 * 1024
_SMALL_BODY = 16 * 1024
_TAIL = 16 * 1024
_DONTWAIT = socket.MSG_DONTWAIT
_FLUSH_BYTES = 4 * 1024 * 1024
_FLUSH_BUFFERS = 512


@dataclass
class ServerStats:
    connections: int = 0
    reads: int = 0
    writes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    rejected: int = 0
    malformed: int = 0
    refused: int = 0
    """Peers turned away at the connection limit (every connection busy)."""
    evicted: int = 0
    """Idle connections closed to admit a new peer at the connection limit."""
    timed_out: int = 0
    """Connections closed after receiving nothing for the receive timeout (idle or stalled)."""

    def add(self, other: ServerStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class _Closed(Exception):
    """The session ends: the connection is closed."""


class TcpServer:
    """``limits``: receive timeout and connection limit (``reference_engine.hub``)."""

    def __init__(
        self,
        buffers: RegisteredBuffers,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        limits: Limits = BINARY_LIMITS,
    ) -> None:
        self._buffers = buffers
        self.limits = limits
        self._bind = (bind_host, port)
        self._lock = threading.Lock()
        self._sessions: set[_Session] = set()
        self._finished = ServerStats()
        self._hub: ConnectionHub | None = None
        self.port = 0

    def start(self) -> int:
        if self._hub is not None:
            return self.port
        hub = ConnectionHub("tcp-data", *self._bind, self.limits, self._open_session)
        self.port = hub.start()
        self._hub = hub
        return self.port

    def stop(self, timeout: float = 5.0) -> None:
        hub, self._hub = self._hub, None
        if hub is not None:
            with self._lock:
                self._finished.add(self._hub_stats(hub))
            hub.stop(timeout)

    def stats(self) -> ServerStats:
        total = ServerStats()
        with self._lock:
            total.add(self._finished)
            for session in self._sessions:
                total.add(session.st)
        hub = self._hub
        if hub is not None:
            total.add(self._hub_stats(hub))
        return total

    def connections(self) -> HubStats:
        """Open, active (being served) and parked connections right now, and the hub's counts."""
        hub = self._hub
        return hub.stats() if hub is not None else HubStats()

    @staticmethod
    def _hub_stats(hub: ConnectionHub) -> ServerStats:
        h = hub.stats()
        return ServerStats(refused=h.refused, evicted=h.evicted, timed_out=h.idle_closed)

    def _open_session(self, sock: socket.socket, peer) -> _Session:
        session = _Session(sock, peer, self._buffers, ServerStats(connections=1),
                           self.limits, self._session_closed)
        with self._lock:
            self._sessions.add(session)
        return session

    def _session_closed(self, session: _Session) -> None:
        with self._lock:
            self._sessions.discard(session)
            self._finished.add(session.st)


class _Session:
    def __init__(self, sock, peer, buffers: RegisteredBuffers, stats: ServerStats,
                 limits: Limits, on_close) -> None:
        self.sock = sock
        self.peer = peer
        self.buffers = buffers
        self.st = stats
        self.limits = limits
        self._on_close = on_close
        self.out: list = []
        self.out_bytes = 0
        self.out_has_reads = False
        self.idle_since = time.monotonic()

    def flush(self) -> None:
        if self.out:
            send_all(self.sock, self.out)
            self.out.clear()
            self.out_bytes = 0
            self.out_has_reads = False

    def recv(self, call, *args) -> int:
        """``call(*args)`` on the socket mid-request; pending responses go out first if it
        would block. A peer silent for the receive timeout ends the session.

        Responses are held back while more requests are already waiting, so a stream of
        pipelined requests costs one ``sendmsg`` per many responses instead of one each.
        """
        if self.out:
            try:
                return call(*args, 0, _DONTWAIT)
            except BlockingIOError:
                self.flush()
        try:
            return call(*args)
        except BlockingIOError:  # SO_RCVTIMEO: nothing arrived for the receive timeout
            self.st.timed_out += 1
            self.close(logging.WARNING, "peer sent nothing for %gs mid-request",
                       self.limits.recv_timeout)
            raise  # not reached

    def recv_next(self, view) -> int | None:
        """Receive at a request boundary (nothing partial buffered): None when the peer stays
        quiet for the linger time (the connection is parked), else as ``recv``."""
        self.idle_since = time.monotonic()  # before the replies go out: the peer waits from now
        if self.out:
            try:
                return self.sock.recv_into(view, 0, _DONTWAIT)
            except BlockingIOError:
                self.flush()
        if not readable_within(self.sock, self.limits.linger):
            return None
        return self.recv(self.sock.recv_into, view)

    def close(self, level: int, msg: str, *args) -> None:
        log.log(level, "tcp session %s: " + msg + "; closing connection", self.peer, *args)
        self.flush()
        raise _Closed

    def closed(self) -> None:
        self._on_close(self)

    def serve(self) -> bool:
        """Serve until the peer goes quiet between requests (True: park) or the session ends."""
        try:
            return self._serve()
        except _Closed:
            return False

    def _serve(self) -> bool:
        buf = bytearray(STAGING_SIZE)  # released while the connection is parked
        mv = memoryview(buf)
        unpack = wire.HEADER.unpack_from
        resolve = self.buffers.resolve
        out = self.out
        ok = wire.STATUS_OK_FRAME
        st = self.st
        start = end = 0
        need = wire.HEADER_SIZE
        recv, recv_into, recv_next = self.recv, self.sock.recv_into, self.recv_next
        while True:
            if end - start < need:
                if start == end:
                    start = end = 0
                    n = recv_next(mv)
                    if n is None:
                        return True
                else:
                    if STAGING_SIZE - start < need:
                        rem = end - start
                        buf[:rem] = buf[start:end]
                        start, end = 0, rem
                    n = recv(recv_into, mv[end:])
                if n == 0:
                    if end > start:
                        self.close(
                            logging.WARNING,
                            "peer closed mid-request (%d of %d bytes)",
                            end - start,
                            need,
                        )
                    # end of stream after whole requests (a half-close): answer them first
                    self.flush()
                    return False
                end += n
                continue
            size, addr, raw = unpack(buf, start)
            op = raw & 0x7F
            v2 = raw & wire.V2_FLAG
            if op == wire.WRITE:
                dest = resolve(addr, size)
                if dest is None:
                    start += wire.HEADER_SIZE
                    self.reject(addr, size, v2, "WRITE")
                if size <= _SMALL_BODY and end - start < wire.HEADER_SIZE + size:
                    need = wire.HEADER_SIZE + size
                    continue
                need = wire.HEADER_SIZE
                start += wire.HEADER_SIZE
                if self.out_has_reads:
                    self.flush()
                have = end - start
                if have >= size:
                    dest[:] = mv[start : start + size]
                    start += size
                else:
                    if have:
                        dest[:have] = mv[start:end]
                    start, end = 0, self.recv_body(dest[have:], mv[:_TAIL], addr, size)
                st.writes += 1
                st.bytes_written += size
                if v2:
                    out.append(ok)
                    if len(out) >= _FLUSH_BUFFERS:
                        self.flush()
            elif op == wire.READ:
                start += wire.HEADER_SIZE
                dest = resolve(addr, size)
                if dest is None:
                    self.reject(addr, size, v2, "READ")
                if v2:
                    out.append(ok)
                out.append(dest)
                self.out_has_reads = True
                self.out_bytes += size
                st.reads += 1
                st.bytes_read += size
                if self.out_bytes >= _FLUSH_BYTES or len(out) >= _FLUSH_BUFFERS:
                    self.flush()
            else:
                st.malformed += 1
                self.close(logging.WARNING, "malformed header: opcode byte 0x%02x", raw)

    def recv_body(self, rest: memoryview, tail: memoryview, addr: int, size: int) -> int:
        """Receive the rest of a large body straight into its destination; bytes that follow it
        on the wire land in ``tail`` (the staging buffer). Returns how many did."""
        recv, recvmsg_into = self.recv, self.sock.recvmsg_into
        while True:
            n = recv(recvmsg_into, [rest, tail])[0]
            if n == 0:
                self.close(logging.WARNING, "peer closed mid-body of WRITE 0x%x+%d", addr, size)
            if n >= len(rest):
                return n - len(rest)
            rest = rest[n:]

    def reject(self, addr: int, size: int, v2: int, what: str) -> None:
        self.st.rejected += 1
        if v2:
            self.out.append(wire.STATUS_REJECTED_FRAME)
        self.close(
            logging.WARNING,
            "rejected %s of %d bytes at 0x%x: not within one registered buffer",
            what,
            size,
            addr,
        )
