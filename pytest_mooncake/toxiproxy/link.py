"""One proxied TCP connection: two links (upstream = client to server, downstream = server to
client), each a reader that timestamps chunks and a pump that sends them through the link's
toxics to the other socket.

A natural close is passed on as a half-close (``shutdown(SHUT_WR)``); the connection ends when
both directions have closed. A toxic (timeout, limit_data, reset_peer) or a socket error tears
the whole connection down, with a TCP RST for reset_peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pytest_mooncake.toxiproxy.toxics import Chunk, Toxic

UPSTREAM = "upstream"
DOWNSTREAM = "downstream"
DIRECTIONS = (UPSTREAM, DOWNSTREAM)
READ_SIZE = 256 * 1024
QUEUE_CHUNKS = 1024  # Toxiproxy's latency toxic buffers 1024 chunks too
QUEUE_BYTES = 8 * 1024 * 1024  # ...of at most 32 KiB each; we bound the bytes instead
CLOSE_GRACE_SECONDS = 5.0


class ToxicSpecLike(Protocol):
    name: str
    stream: str
    toxicity: float
    toxic: Toxic


class ActiveToxic:
    """A toxic on one link: whether it applies here (toxicity), its per-link state, and the
    ``ToxicContext`` the toxic acts through."""

    def __init__(self, link: Link, spec: ToxicSpecLike):
        self.link = link
        self.rng = link.rng
        self.state: dict[str, Any] = {}
        self._waiters: set[asyncio.Future[bool]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._set(spec)

    def _set(self, spec: ToxicSpecLike) -> None:
        self.spec = spec
        self.toxic = spec.toxic
        self.applied = self.rng.random() < spec.toxicity
        if self.applied and self.toxic.has_watch:
            self._watch = asyncio.get_running_loop().create_task(self.toxic.watch(self))

    def update(self, spec: ToxicSpecLike) -> None:
        self._stop()
        self._set(spec)

    def remove(self) -> None:
        self._stop()
        if self.applied:
            self.toxic.on_remove(self)

    def _stop(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    # ToxicContext
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, when: float) -> bool:
        loop = asyncio.get_running_loop()
        delay = when - loop.time()
        if delay <= 0:
            return True
        fut: asyncio.Future[bool] = loop.create_future()
        handle = loop.call_later(delay, lambda: fut.done() or fut.set_result(True))
        self._waiters.add(fut)
        try:
            return await fut
        finally:
            handle.cancel()
            self._waiters.discard(fut)

    def close(self) -> None:
        self.link.connection.abort(reset=False)

    def reset(self) -> None:
        self.link.connection.abort(reset=True)


class Link:
    """One direction of a connection with its chain of toxics."""

    def __init__(self, connection: Connection, direction: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, rng: random.Random):
        self.connection = connection
        self.direction = direction
        self.reader = reader
        self.writer = writer
        self.rng = rng
        self.chain: dict[str, ActiveToxic] = {}
        self.queue: asyncio.Queue[Chunk | None] = asyncio.Queue(QUEUE_CHUNKS)
        self._busy = False
        self._queued_bytes = 0
        self._room = asyncio.Event()
        self._room.set()

    def add(self, spec: ToxicSpecLike) -> None:
        self.chain[spec.name] = ActiveToxic(self, spec)

    def update(self, spec: ToxicSpecLike) -> None:
        if spec.name in self.chain:
            self.chain[spec.name].update(spec)

    def remove(self, name: str) -> None:
        active = self.chain.pop(name, None)
        if active is not None:
            active.remove()

    def stop_toxics(self) -> None:
        for active in self.chain.values():
            active._stop()

    async def read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await self.reader.read(READ_SIZE):
                if not self.chain and not self._busy and self.queue.empty():
                    # Fast path: nothing queued or in flight and no toxics, so writing here
                    # keeps the order and saves a hop through the pump.
                    await self._write(Chunk(data, 0.0))
                    continue
                chunk = Chunk(data, loop.time())
                await self._room.wait()
                self._queued_bytes += len(data)
                if self._queued_bytes >= QUEUE_BYTES:
                    self._room.clear()
                await self.queue.put(chunk)
        except OSError:
            self.connection.abort(reset=False)
            return
        await self.queue.put(None)

    async def pump(self) -> None:
        try:
            while (chunk := await self.queue.get()) is not None:
                self._busy = True
                self._queued_bytes -= len(chunk.data)
                if self._queued_bytes < QUEUE_BYTES:
                    self._room.set()
                chain = [t for t in self.chain.values() if t.applied]
                if chain:
                    await self._through(chain, 0, chunk)
                else:
                    await self._write(chunk)
                self._busy = False
            for active in [t for t in self.chain.values() if t.applied]:
                await active.toxic.on_eof(active)
            if self.writer.can_write_eof():
                self.writer.write_eof()
        except OSError:
            self.connection.abort(reset=False)

    async def _through(self, chain: list[ActiveToxic], index: int, chunk: Chunk) -> None:
        if index == len(chain):
            await self._write(chunk)
            return
        active = chain[index]
        await active.toxic.pipe(active, chunk, functools.partial(self._through, chain, index + 1))

    async def _write(self, chunk: Chunk) -> None:
        if self.connection.aborted:
            return
        self.writer.write(chunk.data)
        await self.writer.drain()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Connection:
    """A client connection and its upstream connection, joined by two links."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 specs: Iterable[ToxicSpecLike], rng_seed: str,
                 on_done: Callable[[Connection], None]):
        self.writers = (client[1], upstream[1])
        for writer in self.writers:
            _nodelay(writer)
        self.links = {
            UPSTREAM: Link(self, UPSTREAM, client[0], upstream[1],
                           random.Random(f"{rng_seed}:{UPSTREAM}")),
            DOWNSTREAM: Link(self, DOWNSTREAM, upstream[0], client[1],
                             random.Random(f"{rng_seed}:{DOWNSTREAM}")),
        }
        self._specs = list(specs)
        self._on_done = on_done
        self._tasks: list[asyncio.Task[None]] = []
        self.aborted = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for spec in self._specs:
            self.links[spec.stream].add(spec)
        pumps = []
        for link in self.links.values():
            self._tasks.append(loop.create_task(link.read_loop()))
            pumps.append(loop.create_task(link.pump()))
        self._tasks += pumps
        try:
            await asyncio.wait(pumps)
        finally:
            self.abort(reset=False)

    def abort(self, reset: bool) -> None:
        """Tear the connection down now; with ``reset``, with a TCP RST on both sockets."""
        if self.aborted:
            return
        self.aborted = True
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        for link in self.links.values():
            link.stop_toxics()
        for writer in self.writers:
            _close(writer, reset)
        if current in self._tasks:
            current.cancel()
        self._on_done(self)


def _close(writer: asyncio.StreamWriter, reset: bool) -> None:
    transport = writer.transport
    if reset:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        return
    transport.close()
    asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)
