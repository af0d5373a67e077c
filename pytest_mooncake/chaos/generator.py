"""Seeded workload generators: what each worker asks the system to do, op after op.

A ``Generator`` describes a stream of ``OpSpec`` (f, key, value); ``Workload(gen, seed)`` gives
each worker its own stream, seeded from (seed, worker), so the same seed yields the same ops
per worker however the threads interleave. Generators compose like Jepsen's: ``mix`` picks
among several by weight, ``limit`` caps the count, ``time_limit`` the duration, ``stagger``
spaces ops with random delays (the runner waits them out, interruptibly).

Written values are unique: ``w<worker>-<n>``, so a read identifies the write it saw.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_mooncake.chaos.checkers import GET, PUT, READ, REMOVE, SCAN, WRITE


@dataclass(frozen=True)
class OpSpec:
    """One operation to invoke: ``f`` on ``key`` with ``value``, after waiting ``delay`` s."""

    f: str
    key: Any = None
    value: Any = None
    delay: float = 0.0
    final: bool = False


@dataclass
class GenContext:
    """Per-worker state shared by the generators of one stream."""

    rng: random.Random
    worker: int
    clock: Callable[[], float] = time.monotonic
    _counter: Iterator[int] = field(default_factory=itertools.count)

    def unique(self) -> str:
        """A value no other op of any worker writes."""
        return f"w{self.worker}-{next(self._counter)}"


class Generator:
    """A recipe for a stream of ops; ``stream(ctx)`` starts one."""

    def stream(self, ctx: GenContext) -> Iterator[OpSpec]:
        raise NotImplementedError

    def limit(self, n: int) -> Generator:
        return limit(n, self)

    def time_limit(self, seconds: float) -> Generator:
        return time_limit(seconds, self)

    def stagger(self, mean_delay: float) -> Generator:
        return stagger(mean_delay, self)


class _FromFunction(Generator):
    def __init__(self, make: Callable[[GenContext], Iterator[OpSpec]], label: str):
        self._make = make
        self.label = label

    def stream(self, ctx: GenContext) -> Iterator[OpSpec]:
        return self._make(ctx)

    def __repr__(self) -> str:
        return self.label


def _keys(keys: int | Sequence[str], prefix: str) -> list[str]:
    out = [f"{prefix}{i}" for i in range(keys)] if isinstance(keys, int) else list(keys)
    if not out:
        raise ValueError("a workload needs at least one key")
    return out


def _weighted(ctx: GenContext, weights: dict[str, float]) -> Iterator[str]:
    names = [n for n, w in weights.items() if w > 0]
    if not names:
        raise ValueError(f"every weight is zero: {weights}")
    ws = [weights[n] for n in names]
    while True:
        yield ctx.rng.choices(names, ws)[0]


def kv(keys: int | Sequence[str] = 8, put: float = 3, get: float = 3, remove: float = 1,
       scan: float = 0, key_prefix: str = "k") -> Generator:
    """Puts of unique values, gets and removes over a key space, chosen by weight."""
    names = _keys(keys, key_prefix)

    def make(ctx: GenContext) -> Iterator[OpSpec]:
        for f in _weighted(ctx, {PUT: put, GET: get, REMOVE: remove, SCAN: scan}):
            if f == SCAN:
                yield OpSpec(SCAN)
                continue
            key = ctx.rng.choice(names)
            yield OpSpec(f, key, ctx.unique() if f == PUT else None)

    return _FromFunction(make, f"kv({len(names)} keys)")


def slot_key(segment: str, slot: int) -> str:
    """The register a transfer op addresses: ``"<segment>/<slot>"``."""
    return f"{segment}/{slot}"


def transfer_keys(segments: Sequence[str], slots: int) -> list[str]:
    """Every slot of every segment, e.g. for ``final_reads(transfer_keys(...), f="read")``."""
    return [slot_key(seg, i) for seg in segments for i in range(slots)]


def transfers(segments: Sequence[str], slots: int = 16, write: float = 1, read: float = 1
              ) -> Generator:
    """Writes of unique data into slots of peer segments, and reads of them. Key =
    ``"<segment>/<slot>"`` (a client maps the slot to an offset), value = the data written."""
    if not segments or slots <= 0:
        raise ValueError("transfers need at least one segment and one slot")

    def make(ctx: GenContext) -> Iterator[OpSpec]:
        for f in _weighted(ctx, {WRITE: write, READ: read}):
            key = slot_key(ctx.rng.choice(list(segments)), ctx.rng.randrange(slots))
            yield OpSpec(f, key, ctx.unique() if f == WRITE else None)

    return _FromFunction(make, f"transfers({list(segments)}, {slots} slots)")


def final_reads(keys: int | Sequence[str] = 8, key_prefix: str = "k", f: str = GET
                ) -> Generator:
    """One read of every key, marked final (the post-heal phase the checkers judge); for
    transfers: ``final_reads(transfer_keys(segments, slots), f="read")``."""
    names = _keys(keys, key_prefix)
    return _FromFunction(lambda ctx: (OpSpec(f, k, final=True) for k in names),
                         f"final_reads({len(names)} keys)")


def ops(*specs: OpSpec) -> Generator:
    """Exactly these ops, in order."""
    return _FromFunction(lambda ctx: iter(specs), f"ops({len(specs)})")


def mix(*gens: Generator, weights: Sequence[float] | None = None) -> Generator:
    """Each op comes from one of ``gens`` picked by weight; ends when all are exhausted."""
    if not gens:
        raise ValueError("mix needs at least one generator")
    ws = list(weights) if weights is not None else [1.0] * len(gens)
    if len(ws) != len(gens):
        raise ValueError(f"mix: {len(gens)} generators but {len(ws)} weights")

    def make(ctx: GenContext) -> Iterator[OpSpec]:
        live = [(g.stream(ctx), w) for g, w in zip(gens, ws, strict=True) if w > 0]
        while live:
            i = ctx.rng.choices(range(len(live)), [w for _, w in live])[0]
            try:
                yield next(live[i][0])
            except StopIteration:
                del live[i]

    return _FromFunction(make, f"mix({', '.join(map(repr, gens))})")


def limit(n: int, gen: Generator) -> Generator:
    """At most ``n`` ops of ``gen`` (per worker stream)."""
    return _FromFunction(lambda ctx: itertools.islice(gen.stream(ctx), n), f"limit({n}, {gen!r})")


def time_limit(seconds: float, gen: Generator) -> Generator:
    """Ops of ``gen`` until ``seconds`` after the stream's first op."""

    def make(ctx: GenContext) -> Iterator[OpSpec]:
        deadline = ctx.clock() + seconds
        for spec in gen.stream(ctx):
            if ctx.clock() >= deadline:
                return
            yield spec

    return _FromFunction(make, f"time_limit({seconds}, {gen!r})")


def stagger(mean_delay: float, gen: Generator) -> Generator:
    """Each op of ``gen`` waits a random delay, uniform in [0, 2 * mean_delay), first."""

    def make(ctx: GenContext) -> Iterator[OpSpec]:
        for spec in gen.stream(ctx):
            yield replace(spec, delay=spec.delay + ctx.rng.uniform(0, 2 * mean_delay))

    return _FromFunction(make, f"stagger({mean_delay}, {gen!r})")


class Workload:
    """A generator bound to a seed: ``for_worker(i)`` is worker ``i``'s op stream."""

    def __init__(self, gen: Generator, seed: int, clock: Callable[[], float] = time.monotonic):
        self.gen = gen
        self.seed = seed
        self.clock = clock

    def for_worker(self, worker: int) -> Iterator[OpSpec]:
        rng = random.Random(f"{self.seed}/worker/{worker}")
        return self.gen.stream(GenContext(rng, worker, self.clock))

    def __repr__(self) -> str:
        return f"Workload({self.gen!r}, seed={self.seed})"
