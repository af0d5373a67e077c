"""Toxiproxy's toxics, one class each, with Toxiproxy's type names and JSON attributes.

Semantics follow Shopify/toxiproxy ``toxics/*.go``. A toxic sees one direction of one
connection through a ``ToxicContext`` (its link): chunks come in through ``pipe`` and go on with
``emit``; ``on_eof`` runs when the source closed; ``watch`` runs in the background while the
toxic is active; ``on_remove`` runs when it is removed from a live connection.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pytest_mooncake.toxiproxy.names import brief


@dataclass
class Chunk:
    """Bytes read from one side, with the loop time they were read (latency counts from it)."""

    data: bytes
    timestamp: float


Emit = Callable[[Chunk], Awaitable[None]]


class ToxicContext(Protocol):
    """What a toxic may use and do on its link."""

    rng: random.Random
    state: dict[str, Any]

    def now(self) -> float: ...

    async def sleep_until(self, when: float) -> bool:
        """Sleep until loop time ``when``; False if the toxic was updated or removed first."""

    def close(self) -> None:
        """Close the connection (FIN) once what was emitted is written."""

    def reset(self) -> None:
        """Close the connection with a TCP RST (SO_LINGER 0)."""


class ToxicAttributeError(ValueError):
    """A toxic attribute is missing, of the wrong type, or out of range."""


class Toxic:
    """A toxic type: its attributes, validated, and its effect on a stream."""

    type_name: ClassVar[str]
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **attributes: int):
        for name in self.fields:
            setattr(self, name, int(attributes.get(name, 0)))
        self.validate()

    @classmethod
    def from_attributes(cls, attributes: Any, base: Toxic | None = None) -> Toxic:
        """Build from a JSON ``attributes`` object; fields not given keep ``base``'s values
        (Toxiproxy decodes an update into the existing toxic) or 0."""
        if attributes is None:
            attributes = {}
        if not isinstance(attributes, dict):
            raise ToxicAttributeError("attributes must be a JSON object")
        values = dict(base.attributes()) if base is not None else {}
        for key, value in attributes.items():
            if key not in cls.fields:
                known = ", ".join(cls.fields) or "none"
                raise ToxicAttributeError(
                    f"unknown attribute {brief(key)} for toxic type {cls.type_name} (known: {known})")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ToxicAttributeError(f"attribute {key!r} must be an integer, got {brief(value)}")
            if value < 0:
                raise ToxicAttributeError(f"attribute {brief(key)} must be >= 0, got {value}")
            if value >= 2**63:
                raise ToxicAttributeError(f"attribute {key!r} is too large: {value}")
            values[key] = value
        return cls(**values)

    def validate(self) -> None:
        """Reject attribute combinations Toxiproxy would mis-handle."""

    def attributes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.fields}

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        await emit(chunk)

    async def on_eof(self, ctx: ToxicContext) -> None:
        """The source closed; return to let the close go on."""

    async def watch(self, ctx: ToxicContext) -> None:
        """Background behaviour while active; cancelled when the toxic changes."""

    has_watch: ClassVar[bool] = False

    def on_remove(self, ctx: ToxicContext) -> None:
        """The toxic was removed while active on a live connection."""


class Noop(Toxic):
    """Passes data through; Toxiproxy registers it as a type, so we do too."""

    type_name = "noop"


class Latency(Toxic):
    """Delays every chunk by ``latency`` ms, plus or minus up to ``jitter`` ms."""

    type_name = "latency"
    fields = ("latency", "jitter")
    latency: int
    jitter: int

    def delay(self, rng: random.Random) -> float:
        ms = self.latency
        if self.jitter > 0:
            ms += rng.randrange(-self.jitter, self.jitter)
        return ms / 1000.0

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        due = chunk.timestamp + self.delay(ctx.rng)
        await ctx.sleep_until(due)
        chunk.timestamp = max(due, chunk.timestamp)
        await emit(chunk)


class Bandwidth(Toxic):
    """Passes at most ``rate`` KB/s (1 KB = 1000 bytes, as Toxiproxy computes it); 0 = no
    limit. Large chunks go out in pieces of 100 ms worth of data."""

    type_name = "bandwidth"
    fields = ("rate",)
    rate: int

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        if self.rate <= 0:
            await emit(chunk)
            return
        bytes_per_second = self.rate * 1000.0
        piece_size = self.rate * 100
        data = chunk.data
        while data:
            piece, data = data[:piece_size], data[piece_size:]
            free_at = max(ctx.state.get("free_at", 0.0), ctx.now()) + len(piece) / bytes_per_second
            ctx.state["free_at"] = free_at
            if not await ctx.sleep_until(free_at):
                await emit(Chunk(piece + data, chunk.timestamp))
                return
            await emit(Chunk(piece, chunk.timestamp))


class SlowClose(Toxic):
    """Delays the close of the stream by ``delay`` ms."""

    type_name = "slow_close"
    fields = ("delay",)
    delay: int

    async def on_eof(self, ctx: ToxicContext) -> None:
        await ctx.sleep_until(ctx.now() + self.delay / 1000.0)


class Timeout(Toxic):
    """Drops all data; closes the connection after ``timeout`` ms, or with 0 holds it open
    (a black hole) until the toxic is removed. Removing it closes the connection, as
    Toxiproxy's ``Cleanup`` does."""

    type_name = "timeout"
    fields = ("timeout",)
    timeout: int
    has_watch = True

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        return

    async def watch(self, ctx: ToxicContext) -> None:
        if self.timeout > 0 and await ctx.sleep_until(ctx.now() + self.timeout / 1000.0):
            ctx.close()

    def on_remove(self, ctx: ToxicContext) -> None:
        ctx.close()


class ResetPeer(Toxic):
    """On the first data (or the close) from the source, waits ``timeout`` ms and then resets
    the connection with a TCP RST; the data is dropped."""

    type_name = "reset_peer"
    fields = ("timeout",)
    timeout: int

    async def _reset(self, ctx: ToxicContext) -> None:
        # Like Toxiproxy, the wait is not cut short by removing the toxic.
        while not await ctx.sleep_until(ctx.state.setdefault("reset_at", ctx.now()
                                                             + self.timeout / 1000.0)):
            pass
        ctx.reset()

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        await self._reset(ctx)

    async def on_eof(self, ctx: ToxicContext) -> None:
        await self._reset(ctx)


class Slicer(Toxic):
    """Cuts each chunk into pieces of about ``average_size`` bytes (+/- ``size_variation``),
    waiting ``delay`` microseconds after each piece."""

    type_name = "slicer"
    fields = ("average_size", "size_variation", "delay")
    average_size: int
    size_variation: int
    delay: int

    def validate(self) -> None:
        if self.average_size < 1:
            raise ToxicAttributeError("slicer needs average_size >= 1")
        if self.size_variation >= self.average_size:
            raise ToxicAttributeError(
                f"slicer needs size_variation < average_size "
                f"(got {self.size_variation} >= {self.average_size})")

    def cuts(self, size: int, rng: random.Random) -> list[tuple[int, int]]:
        """Piece bounds covering [0, size), split about in half until small enough."""
        out: list[tuple[int, int]] = []
        todo = [(0, size)]
        while todo:
            start, end = todo.pop()
            if (end - start) - self.average_size <= self.size_variation:
                out.append((start, end))
                continue
            mid = start + (end - start) // 2
            if self.size_variation > 0:
                mid += rng.randrange(-self.size_variation, self.size_variation)
            todo.append((mid, end))
            todo.append((start, mid))
        return out

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        data = chunk.data
        for start, end in self.cuts(len(data), ctx.rng):
            await emit(Chunk(data[start:end], chunk.timestamp))
            if end < len(data) and not await ctx.sleep_until(ctx.now() + self.delay / 1e6):
                await emit(Chunk(data[end:], chunk.timestamp))
                return


class LimitData(Toxic):
    """Passes the first ``bytes`` bytes of the stream, then closes the connection."""

    type_name = "limit_data"
    fields = ("bytes",)
    bytes: int

    async def pipe(self, ctx: ToxicContext, chunk: Chunk, emit: Emit) -> None:
        sent = ctx.state.get("sent", 0)
        piece = chunk.data[:max(self.bytes - sent, 0)]
        if piece:
            ctx.state["sent"] = sent + len(piece)
            await emit(Chunk(piece, chunk.timestamp))
        if self.bytes - ctx.state.get("sent", 0) <= 0:
            ctx.close()


TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type_name: cls
    for cls in (Noop, Latency, Bandwidth, SlowClose, Timeout, ResetPeer, Slicer, LimitData)
}
