"""One proxied TCP connection: two links (upstream = client to server, downstream = server to
client). A link takes what its source socket reads; with no toxics it writes it straight to the
other socket, else it queues timestamped chunks for a pump task that sends them through the
link's toxics.

A natural close is passed on as a half-close (``shutdown(SHUT_WR)``); the connection ends when
both directions have closed. A toxic (timeout, limit_data, reset_peer) or a socket error tears
the whole connection down, with a TCP RST for reset_peer.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pytest_mooncake.toxiproxy.side import Side
from pytest_mooncake.toxiproxy.toxics import Chunk, Toxic

UPSTREAM = "upstream"
DOWNSTREAM = "downstream"
DIRECTIONS = (UPSTREAM, DOWNSTREAM)
QUEUE_BYTES = 8 * 1024 * 1024  # reading pauses above this many bytes waiting for toxics


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
        self.stop()
        self._set(spec)

    def remove(self) -> None:
        self.stop()
        if self.applied:
            self.toxic.on_remove(self)

    def stop(self) -> None:
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

    def __init__(self, connection: Connection, direction: str, source: Side, dest: Side,
                 rng: random.Random):
        self.connection = connection
        self.direction = direction
        self.source = source
        self.dest = dest
        self.rng = rng
        self.chain: dict[str, ActiveToxic] = {}
        self.queue: asyncio.Queue[Chunk | None] = asyncio.Queue()
        self._queued_bytes = 0
        self._busy = False
        dest.on_resume_writing = lambda: source.resume_reading("dest")

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
            active.stop()

    # ---------------------------------------------------------------- from the source side

    def feed(self, data: bytes) -> None:
        if self.connection.aborted:
            return
        self.connection.on_bytes(self.direction, len(data))
        if not self.chain and not self._busy and self.queue.empty():
            # Nothing queued or in flight and no toxics: writing now keeps the order.
            self.dest.write(data)
            if not self.dest.writable():
                self.source.pause_reading("dest")
            return
        self.queue.put_nowait(Chunk(data, asyncio.get_running_loop().time()))
        self._queued_bytes += len(data)
        if self._queued_bytes >= QUEUE_BYTES:
            self.source.pause_reading("queue")

    def feed_eof(self) -> None:
        self.queue.put_nowait(None)

    def lost(self, exc: Exception | None) -> None:
        self.connection.abort(reset=False)

    # ---------------------------------------------------------------- to the dest side

    async def pump(self) -> None:
        while (chunk := await self.queue.get()) is not None:
            self._busy = True
            self._queued_bytes -= len(chunk.data)
            if self._queued_bytes < QUEUE_BYTES:
                self.source.resume_reading("queue")
            chain = [t for t in self.chain.values() if t.applied]
            if chain:
                await self._through(chain, 0, chunk)
            else:
                await self._write(chunk)
            self._busy = False
        for active in [t for t in self.chain.values() if t.applied]:
            await active.toxic.on_eof(active)
        self.dest.write_eof()

    async def _through(self, chain: list[ActiveToxic], index: int, chunk: Chunk) -> None:
        if index == len(chain):
            await self._write(chunk)
            return
        active = chain[index]
        await active.toxic.pipe(active, chunk, functools.partial(self._through, chain, index + 1))

    async def _write(self, chunk: Chunk) -> None:
        if self.connection.aborted:
            return
        self.dest.write(chunk.data)
        await self.dest.drained()


class Connection:
    """A client socket and its upstream socket, joined by two links."""

    def __init__(self, client: Side, upstream: Side, specs: Iterable[ToxicSpecLike],
                 rng_seed: str, on_done: Callable[[Connection], None],
                 on_bytes: Callable[[str, int], None] = lambda direction, n: None):
        self.sides = (client, upstream)
        self.on_bytes = on_bytes
        """Told of every read from either socket: (direction, bytes) - the proxy's metrics."""
        self.links = {
            UPSTREAM: Link(self, UPSTREAM, client, upstream,
                           random.Random(f"{rng_seed}:{UPSTREAM}")),
            DOWNSTREAM: Link(self, DOWNSTREAM, upstream, client,
                             random.Random(f"{rng_seed}:{DOWNSTREAM}")),
        }
        self._specs = list(specs)
        self._on_done = on_done
        self._pumps: list[asyncio.Task[None]] = []
        self.aborted = False

    async def run(self) -> None:
        """Join the sockets until both directions closed or the connection is torn down."""
        loop = asyncio.get_running_loop()
        for spec in self._specs:
            self.links[spec.stream].add(spec)
        for link in self.links.values():
            link.source.attach(link)
        self._pumps = [loop.create_task(link.pump()) for link in self.links.values()]
        try:
            await asyncio.wait(self._pumps)
        finally:
            self.abort(reset=False)

    def abort(self, reset: bool) -> None:
        """Tear the connection down now; with ``reset``, with a TCP RST on both sockets."""
        if self.aborted:
            return
        self.aborted = True
        current = asyncio.current_task()
        for task in self._pumps:
            if task is not current:
                task.cancel()
        for link in self.links.values():
            link.stop_toxics()
        for side in self.sides:
            side.close(reset)
        if current in self._pumps:
            current.cancel()
        self._on_done(self)
