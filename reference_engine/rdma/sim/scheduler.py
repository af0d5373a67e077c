"""A controlled scheduler for cooperative actors (worker, monitor, fabric and chaos steps).

Actors are generators that yield named points (``points``); after every point a strategy picks
which enabled actor runs next. An actor that yields ``IDLE`` is blocked until its ``has_work``
turns true. Everything runs on one thread, so a schedule is exactly reproducible from
(strategy, seed, parameters), and the recorded choice sequence replays it independently of
the random generator.

Strategies: ``RandomWalk``, ``PCT`` (Burckhardt et al., ASPLOS 2010: random priorities, d-1
priority change points over k steps; finds a depth-d bug with probability >= 1/(n k^(d-1))),
``Replay`` (a recorded choice sequence), ``Scripted`` (run named actors to named points, for
the RFC's interleavings by name) and ``RoundRobin``.
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reference_engine.rdma.points import IDLE


class ScheduleError(Exception):
    """A script or token that cannot drive the scenario it was given."""


class Actor:
    __slots__ = ("name", "gen", "has_work", "blocked", "done", "index")

    def __init__(self, name: str, gen, has_work: Callable[[], bool], index: int):
        self.name = name
        self.gen = gen
        self.has_work = has_work
        self.blocked = False
        self.done = False
        self.index = index


# ---------------------------------------------------------------------------- strategies
class RoundRobin:
    name = "rr"

    def reset(self, actors: Sequence[Actor]) -> None:
        self.last = -1

    def choose(self, enabled: list[Actor], step: int) -> Actor:
        return enabled[self.pick(enabled, step)]

    def pick(self, enabled: list[Actor], step: int) -> int:
        for i, a in enumerate(enabled):
            if a.index > self.last:
                self.last = a.index
                return i
        self.last = enabled[0].index
        return 0

    def params(self) -> dict[str, Any]:
        return {"st": self.name}


class RandomWalk:
    name = "random"

    def __init__(self, seed: int):
        self.seed = seed

    def reset(self, actors: Sequence[Actor]) -> None:
        self.rng = random.Random(self.seed)

    def choose(self, enabled: list[Actor], step: int) -> Actor:
        return enabled[self.pick(enabled, step)]

    def pick(self, enabled: list[Actor], step: int) -> int:
        n = len(enabled)
        return 0 if n == 1 else self.rng.randrange(n)

    def params(self) -> dict[str, Any]:
        return {"st": self.name, "seed": self.seed}


class PCT:
    """Priority-based probabilistic concurrency testing with bug depth ``depth`` over ``k`` steps."""

    name = "pct"

    def __init__(self, seed: int, depth: int = 2, k: int = 100):
        if depth < 1 or k < 1:
            raise ValueError(f"PCT needs depth >= 1 and k >= 1, got depth={depth} k={k}")
        self.seed = seed
        self.depth = depth
        self.k = k

    def reset(self, actors: Sequence[Actor]) -> None:
        rng = random.Random(self.seed)
        n = len(actors)
        ranks = list(range(n))
        rng.shuffle(ranks)
        self.prio = [self.depth + r for r in ranks]
        points = rng.sample(range(1, self.k + 1), min(self.depth - 1, self.k))
        self.changes = {step: self.depth - 1 - i for i, step in enumerate(sorted(points))}

    def choose(self, enabled: list[Actor], step: int) -> Actor:
        return enabled[self.pick(enabled, step)]

    def pick(self, enabled: list[Actor], step: int) -> int:
        """The highest-priority enabled actor (the first of equals); at a change point its
        priority drops to that point's low value."""
        prio = self.prio
        best, top = 0, prio[enabled[0].index]
        for i in range(1, len(enabled)):
            p = prio[enabled[i].index]
            if p > top:
                best, top = i, p
        if step in self.changes:
            prio[enabled[best].index] = self.changes[step]
        return best

    def params(self) -> dict[str, Any]:
        return {"st": self.name, "seed": self.seed, "d": self.depth, "k": self.k}


class Replay:
    name = "replay"

    def __init__(self, choices: bytes | Sequence[int]):
        self.choices = bytes(choices)

    def reset(self, actors: Sequence[Actor]) -> None:
        pass

    def choose(self, enabled: list[Actor], step: int) -> Actor:
        return enabled[self.pick(enabled, step)]

    def pick(self, enabled: list[Actor], step: int) -> int:
        if step < len(self.choices):
            i = self.choices[step]
            if i >= len(enabled):
                raise ScheduleError(f"replay step {step}: choice {i} but only "
                                    f"{len(enabled)} actors enabled (scenario changed?)")
            return i
        return 0

    def params(self) -> dict[str, Any]:
        return {"st": self.name, "c": base64.urlsafe_b64encode(
            zlib.compress(self.choices, 9)).decode().rstrip("=")}


class Scripted:
    """Run ``(actor_name, point)`` steps in order: the named actor runs until it yields the named
    point (``None`` = one step). Afterwards actors run round-robin until quiescence."""

    name = "script"

    def __init__(self, script: Sequence[tuple[str, str | None]]):
        self.script = list(script)

    def reset(self, actors: Sequence[Actor]) -> None:
        self.pos = 0
        self.by_name = {a.name: a for a in actors}
        self.fallback = RoundRobin()
        self.fallback.reset(actors)
        self.current: Actor | None = None

    def choose(self, enabled: list[Actor], step: int) -> Actor:
        if self.pos >= len(self.script):
            return self.fallback.choose(enabled, step)
        name, _ = self.script[self.pos]
        actor = self.by_name.get(name)
        if actor is None:
            raise ScheduleError(f"script step {self.pos}: no actor named {name!r}; "
                                f"actors: {sorted(self.by_name)}")
        if actor not in enabled:
            raise ScheduleError(f"script step {self.pos}: actor {name!r} is not enabled "
                                f"(blocked or finished)")
        self.current = actor
        return actor

    def observe(self, actor: Actor, point: str | None) -> None:
        if self.pos < len(self.script) and actor is self.current:
            want = self.script[self.pos][1]
            if want is None or want == point:
                self.pos += 1

    def params(self) -> dict[str, Any]:
        return {"st": self.name}


# ---------------------------------------------------------------------------- running
@dataclass
class RunResult:
    steps: int
    quiescent: bool
    choices: bytes
    trace: list[tuple[str, str]] = field(default_factory=list)
    crash: str | None = None
    """``actor: exception`` when an actor raised; the run stops there (replayable)."""


class Scheduler:
    def __init__(self, strategy, max_steps: int = 5000, record_trace: bool = False,
                 on_step: Callable[[Actor, str | None], None] | None = None):
        self.strategy = strategy
        self.max_steps = max_steps
        self.record_trace = record_trace
        self.on_step = on_step

    def run(self, actors: Sequence[tuple[str, Any, Callable[[], bool]]]) -> RunResult:
        acts = [Actor(name, gen, has_work, i) for i, (name, gen, has_work) in enumerate(actors)]
        strategy = self.strategy
        strategy.reset(acts)
        pick = getattr(strategy, "pick", None)
        choose = strategy.choose
        observe = getattr(strategy, "observe", None)
        choices = bytearray()
        record = choices.append
        trace: list[tuple[str, str]] = []
        on_step = self.on_step
        record_trace = self.record_trace
        max_steps = self.max_steps
        live = list(acts)
        """Actors not finished, in index order: ``enabled`` is their runnable subsequence."""
        step = 0
        while True:
            enabled = [a for a in live if not a.blocked or a.has_work()]
            if not enabled:
                return RunResult(step, True, bytes(choices), trace)
            if step >= max_steps:
                return RunResult(step, False, bytes(choices), trace)
            if pick is not None:
                i = pick(enabled, step)
                actor = enabled[i]
            else:
                actor = choose(enabled, step)
                i = enabled.index(actor)
            record(i)
            step += 1
            try:
                point = next(actor.gen)
            except StopIteration:
                actor.done = True
                live.remove(actor)
                point = None
            except Exception as exc:  # noqa: BLE001 - a crash is a finding with a schedule
                return RunResult(step, False, bytes(choices), trace,
                                 f"{actor.name}: {type(exc).__name__}: {exc}")
            actor.blocked = point is IDLE
            if observe is not None:
                observe(actor, point)
            if record_trace:
                trace.append((actor.name, point))
            if on_step is not None:
                on_step(actor, point)


def make_strategy(params: dict[str, Any]):
    st = params.get("st")
    if st == "random":
        return RandomWalk(int(params["seed"]))
    if st == "pct":
        return PCT(int(params["seed"]), int(params.get("d", 2)), int(params.get("k", 100)))
    if st == "replay":
        raw = str(params["c"])
        return Replay(zlib.decompress(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))))
    if st == "rr":
        return RoundRobin()
    raise ScheduleError(f"unknown strategy {st!r}")


TOKEN_PREFIX = "mcs1."
MAX_TOKEN_CHARS = 16384


def encode_token(fields: dict[str, Any]) -> str:
    """A short printable replay token: ``mcs1.`` + base64url(JSON)."""
    raw = json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> dict[str, Any]:
    token = token.strip()
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        raise ScheduleError(f"not a replay token (expected {TOKEN_PREFIX}..., at most "
                            f"{MAX_TOKEN_CHARS} chars): {token[:40]!r}")
    body = token[len(TOKEN_PREFIX):]
    try:
        fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, zlib.error) as exc:
        raise ScheduleError(f"replay token is corrupt: {exc}") from None
    if not isinstance(fields, dict) or "st" not in fields:
        raise ScheduleError("replay token lacks the strategy field 'st'")
    return fields
