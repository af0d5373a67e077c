"""One socket of a proxied connection, as an asyncio protocol.

Protocol callbacks instead of streams: with no toxics, bytes go from ``data_received`` straight
to the other socket's transport in the same loop iteration (about 5x less added round-trip time
than a reader task). Flow control both ways: a full outgoing buffer, or a full toxic queue,
pauses reading on the socket that feeds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Protocol

WRITE_HIGH_WATER = 1024 * 1024
WRITE_LOW_WATER = 256 * 1024
CLOSE_GRACE_SECONDS = 5.0


class Inbound(Protocol):
    """Where a side delivers what it reads (the link that reads from it)."""

    def feed(self, data: bytes) -> None: ...

    def feed_eof(self) -> None: ...

    def lost(self, exc: Exception | None) -> None: ...


class Side(asyncio.Protocol):
    """A socket end: reads go to ``inbound``; writes wait for room with ``drained()``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.inbound: Inbound | None = None
        self.connected = asyncio.get_running_loop().create_future()
        self._writable = asyncio.Event()
        self._writable.set()
        self._pause_reasons: set[str] = set()
        self._early: list[bytes] = []
        self._early_eof = False
        self.closed = False
        self.on_resume_writing: Callable[[], None] | None = None

    # ---------------------------------------------------------------- protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pause_reading("attach")  # until a link takes the bytes
        if not self.connected.done():
            self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.inbound is None:
            self._early.append(data)
        else:
            self.inbound.feed(data)

    def eof_received(self) -> bool:
        if self.inbound is None:
            self._early_eof = True
        else:
            self.inbound.feed_eof()
        return True  # keep the socket open for the other direction (half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        if not self.connected.done():
            self.connected.set_result(None)
        if self.inbound is not None:
            self.inbound.lost(exc)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        if self.on_resume_writing is not None:
            self.on_resume_writing()

    # ---------------------------------------------------------------- used by links

    def attach(self, inbound: Inbound) -> None:
        """Start delivering reads (and what arrived before) to ``inbound``."""
        self.inbound = inbound
        for data in self._early:
            inbound.feed(data)
        self._early.clear()
        if self._early_eof:
            inbound.feed_eof()
        self.resume_reading("attach")

    def pause_reading(self, reason: str) -> None:
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._pause_reasons.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self._pause_reasons:
            return
        self._pause_reasons.discard(reason)
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed and not self.transport.is_closing():
            self.transport.write(data)

    def writable(self) -> bool:
        return self._writable.is_set()

    async def drained(self) -> None:
        await self._writable.wait()

    def write_eof(self) -> None:
        if self.transport is not None and not self.transport.is_closing() \
                and self.transport.can_write_eof():
            with contextlib.suppress(OSError):
                self.transport.write_eof()

    def close(self, reset: bool) -> None:
        """Close now: with ``reset`` a TCP RST (SO_LINGER 0); else a FIN once the buffered
        bytes are out (bounded by ``CLOSE_GRACE_SECONDS``)."""
        transport = self.transport
        if transport is None:
            return
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            return
        transport.close()
        asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)
