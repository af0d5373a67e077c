"""Vectored socket I/O that copes with short sends and receives, without copying payloads."""

from __future__ import annotations

import os
import socket
import struct

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_WAITALL = getattr(socket, "MSG_WAITALL", 0)
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)  # EPIPE, never SIGPIPE, whatever the handler


def set_kernel_timeouts(sock: socket.socket, seconds: float) -> None:
    """Blocking socket whose sends and receives give up after ``seconds`` without progress.

    Unlike ``settimeout`` (non-blocking socket + poll before every call), the kernel does the
    waiting, so a large vectored send or a ``MSG_WAITALL`` receive is a single system call. A
    call that times out raises ``BlockingIOError`` (EAGAIN).
    """
    sock.settimeout(None)
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


def _advance(bufs: list, start: int, n: int) -> int:
    """Drop ``n`` bytes from the front of ``bufs[start:]``; return the new start index."""
    while n:
        b = bufs[start]
        size = len(b)
        if n >= size:
            n -= size
            start += 1
        else:
            bufs[start] = memoryview(b)[n:]
            n = 0
    return start


def send_all(sock: socket.socket, bufs: list) -> None:
    """Send every buffer in order with as few ``sendmsg`` calls as the kernel allows.

    ``bufs`` is consumed (entries may be replaced by shorter views).
    """
    start = 0
    count = len(bufs)
    while start < count:
        chunk = bufs if start == 0 and count <= IOV_MAX else bufs[start : start + IOV_MAX]
        n = sock.sendmsg(chunk, (), _NOSIGNAL)
        start = _advance(bufs, start, n)
        while start < count and len(bufs[start]) == 0:
            start += 1


class RecvInterrupted(OSError):
    """A socket error (or timeout) after ``received`` bytes had already landed."""

    def __init__(self, received: int, cause: OSError) -> None:
        super().__init__(cause.errno, str(cause))
        self.received = received
        self.cause = cause


def recv_all_into(sock: socket.socket, bufs: list, waitall: bool = False) -> int:
    """Fill every writable buffer in order; return bytes received (short only at EOF).

    ``bufs`` is consumed. An EOF before all are full returns the count so far; a socket error
    raises :class:`RecvInterrupted` carrying the count so far. ``waitall`` lets a blocking
    socket fill all buffers in one call (MSG_WAITALL).
    """
    flags = _WAITALL if waitall else 0
    total = 0
    start = 0
    count = len(bufs)
    try:
        while start < count:
            if len(bufs[start]) == 0:
                start += 1
                continue
            if count - start == 1:
                n = sock.recv_into(bufs[start], 0, flags)
            else:
                n = sock.recvmsg_into(bufs[start : start + IOV_MAX], 0, flags)[0]
            if n == 0:
                return total
            total += n
            start = _advance(bufs, start, n)
    except OSError as e:
        raise RecvInterrupted(total, e) from e
    return total
