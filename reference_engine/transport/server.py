"""Server side of the Mooncake TCP transport: serves peers' READs and WRITEs on registered memory.

One thread per connection. Requests are parsed out of a staging buffer so that many small
pipelined requests cost one ``recv``; large WRITE bodies are received straight into the
destination and READ payloads are sent straight from it (``sendmsg`` with memoryviews).
Responses are gathered and sent before the session blocks on the socket again, and before any
WRITE is applied while READ payloads are still queued (so a READ never sees a later WRITE).

Safety: a request is validated against the registered buffers before a byte of its body is
applied; a range outside them (or of size 0) is answered with the rejection status (v2) and the
connection is closed, as Mooncake does. A malformed header (unknown opcode) or a truncated
stream closes the connection with one log line. A WRITE body cut off by a dropped connection may
leave the destination partly updated; the initiator never got an acknowledgement for it.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from dataclasses import dataclass, fields

from . import wire
from .buffers import RegisteredBuffers
from .sockio import send_all

log = logging.getLogger("reference_engine.transport.tcp.server")

STAGING_SIZE = 256 * 1024
_SMALL_BODY = 16 * 1024
_TAIL = 16 * 1024
_DONTWAIT = socket.MSG_DONTWAIT
_SEND_TIMEOUT = struct.pack("ll", 60, 0)
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

    def add(self, other: ServerStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class _Closed(Exception):
    """The session ends: the connection is closed."""


class TcpServer:
    def __init__(
        self,
        buffers: RegisteredBuffers,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        max_sessions: int = 512,
    ) -> None:
        self._buffers = buffers
        self.max_sessions = max_sessions
        self._stopped = threading.Event()
        self._bind = (bind_host, port)
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._sessions: dict[socket.socket, tuple[threading.Thread, ServerStats]] = {}
        self._finished = ServerStats()
        self._stopping = False
        self.port = 0

    def start(self) -> int:
        if self._listener is not None:
            return self.port
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(self._bind)
        lst.listen(128)
        self._listener = lst
        self.port = lst.getsockname()[1]
        self._stopping = False
        self._stopped.clear()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"tcp-accept-{self.port}", daemon=True
        )
        self._accept_thread.start()
        return self.port

    def stop(self, timeout: float = 5.0) -> None:
        lst = self._listener
        if lst is None:
            return
        self._stopping = True
        self._stopped.set()
        try:
            lst.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        lst.close()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        with self._lock:
            sessions = list(self._sessions.items())
        for sock, _ in sessions:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for _, (thread, _) in sessions:
            thread.join(timeout)
        self._listener = None

    def stats(self) -> ServerStats:
        total = ServerStats()
        with self._lock:
            total.add(self._finished)
            for _, st in self._sessions.values():
                total.add(st)
        return total

    def _accept_loop(self) -> None:
        lst = self._listener
        while not self._stopping:
            try:
                sock, peer = lst.accept()
            except OSError as e:
                if self._stopping:
                    return
                # e.g. out of file descriptors: keep serving, retry after a pause
                log.warning("tcp server on port %d: accept failed: %s", self.port, e)
                self._stopped.wait(0.05)
                continue
            with self._lock:
                crowded = len(self._sessions) >= self.max_sessions
                if crowded:
                    self._finished.refused += 1
            if crowded:
                log.warning(
                    "tcp server on port %d: refusing %s, already %d sessions",
                    self.port,
                    peer,
                    self.max_sessions,
                )
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # a peer that stops reading may hold a session for this long, not forever
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SEND_TIMEOUT)
            st = ServerStats(connections=1)
            t = threading.Thread(
                target=self._run_session,
                args=(sock, peer, st),
                name=f"tcp-session-{peer}",
                daemon=True,
            )
            with self._lock:
                if self._stopping:
                    sock.close()
                    return
                self._sessions[sock] = (t, st)
            t.start()

    def _run_session(self, sock: socket.socket, peer, st: ServerStats) -> None:
        try:
            _Session(sock, peer, self._buffers, st).serve()
        except _Closed:
            pass
        except OSError as e:
            if not self._stopping:
                log.info("tcp session %s closed: %s", peer, e)
        finally:
            sock.close()
            with self._lock:
                self._sessions.pop(sock, None)
                self._finished.add(st)


class _Session:
    def __init__(self, sock, peer, buffers: RegisteredBuffers, stats: ServerStats) -> None:
        self.sock = sock
        self.peer = peer
        self.buffers = buffers
        self.st = stats
        self.out: list = []
        self.out_bytes = 0
        self.out_has_reads = False

    def flush(self) -> None:
        if self.out:
            send_all(self.sock, self.out)
            self.out.clear()
            self.out_bytes = 0
            self.out_has_reads = False

    def recv(self, call, *args) -> int:
        """``call(*args)`` on the socket; pending responses go out first if it would block.

        Responses are held back while more requests are already waiting, so a stream of
        pipelined requests costs one ``sendmsg`` per many responses instead of one each.
        """
        if self.out:
            try:
                return call(*args, 0, _DONTWAIT)
            except BlockingIOError:
                self.flush()
        return call(*args)

    def close(self, level: int, msg: str, *args) -> None:
        log.log(level, "tcp session %s: " + msg + "; closing connection", self.peer, *args)
        self.flush()
        raise _Closed

    def serve(self) -> None:
        sock = self.sock
        buf = bytearray(STAGING_SIZE)
        mv = memoryview(buf)
        unpack = wire.HEADER.unpack_from
        resolve = self.buffers.resolve
        out = self.out
        ok = wire.STATUS_OK_FRAME
        st = self.st
        start = end = 0
        need = wire.HEADER_SIZE
        recv, recv_into = self.recv, sock.recv_into
        while True:
            if end - start < need:
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
                    raise _Closed
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
