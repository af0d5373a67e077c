"""Run scenarios under a strategy, check CO-9, explore many schedules, replay tokens."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from reference_engine.rdma.sim.dismantle import dismantle
from reference_engine.rdma.sim.invariants import Violation
from reference_engine.rdma.sim.scenarios import build
from reference_engine.rdma.sim.scheduler import (
    PCT,
    RandomWalk,
    Replay,
    RoundRobin,
    Scheduler,
    Scripted,
    decode_token,
    encode_token,
    make_strategy,
)

DEFAULT_MAX_STEPS = 3000


@dataclass
class Outcome:
    scenario: str
    profile: str
    violations: list[Violation]
    steps: int
    quiescent: bool
    base: dict
    """The token fields every replay of this run carries (scenario, profile, env, pin)."""
    params: dict
    """The strategy's fields (its name, seed, parameters)."""
    choices: bytes
    """The recorded choice sequence."""
    stats: dict[str, int] = field(default_factory=dict)
    trace: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def token(self) -> str:
        """Replays this run by its strategy and seed (encoded on demand: an exploration runs
        thousands of schedules and prints the token of one)."""
        return encode_token({**self.base, **self.params})

    @property
    def exact_token(self) -> str:
        """Replays this run from its recorded choices."""
        return encode_token({**self.base, **Replay(self.choices).params()})


def _env_fields(env: Mapping[str, str]) -> dict:
    return {"env": dict(sorted(env.items()))} if env else {}


def run_once(scenario: str, profile: str, strategy, env: Mapping[str, str] | None = None,
             pinned: bool = False, max_steps: int = DEFAULT_MAX_STEPS,
             record_trace: bool = False) -> Outcome:
    env = dict(env or {})
    run = build(scenario, profile, env, pinned)
    if pinned and not isinstance(strategy, Replay):
        strategy = Scripted(run.script) if run.script else RoundRobin()
    result = Scheduler(strategy, max_steps, record_trace).run(run.actors)
    violations = list(run.checker.check_final(result.quiescent, result.crash))
    base = {"sc": scenario, "pr": profile, **_env_fields(env)}
    if pinned:
        base["pin"] = 1
    outcome = Outcome(scenario, profile, violations, result.steps, result.quiescent, base,
                      strategy.params(), result.choices, dict(run.initiator.stats), result.trace)
    dismantle(run.cluster, run.checker, (run.chaos,))
    return outcome


STRATEGIES = ("mix", "pct", "random")
"""What ``explore`` accepts; ``mix`` is the default."""
PCT_DEPTH, PCT_K = 2, 60
"""``pct``'s defaults: one priority change point among 60 steps."""
MIX_DEPTH, MIX_K = 12, 40
"""``mix``'s PCT schedules: 11 change points among 40 steps (the RFC scenarios run 15-50)."""


def strategy_for(name: str, seed: int, depth: int | None = None, k: int | None = None,
                 index: int = 0):
    """The strategy of schedule ``index`` of an exploration with strategy ``name``.

    ``mix`` alternates PCT (even schedules) and a random walk (odd ones). The two find different
    bugs fast: PCT runs an actor far before a change point preempts it (a fault that must land
    after a long causal chain), a random walk preempts at every step (a window of a few steps).
    Measured on the RFC scenarios (tests/benchmarks/bench_rdma.py), no single PCT depth is at
    least as good as a random walk on all of them; the alternation is. Each schedule is still
    plain PCT or random walk, so its replay token names that strategy."""
    if name == "mix":
        if index % 2:
            return RandomWalk(seed)
        return PCT(seed, depth or MIX_DEPTH, k or MIX_K)
    if name == "pct":
        return PCT(seed, depth or PCT_DEPTH, k or PCT_K)
    if name == "random":
        return RandomWalk(seed)
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {name!r}")


@dataclass
class Exploration:
    scenario: str
    profile: str
    schedules: int
    failure: Outcome | None

    @property
    def found(self) -> bool:
        return self.failure is not None


def explore(scenario: str, profile: str, schedules: int, strategy: str = "mix",
            seed: int = 0, depth: int | None = None, k: int | None = None,
            env: Mapping[str, str] | None = None,
            max_steps: int = DEFAULT_MAX_STEPS) -> Exploration:
    """Run up to ``schedules`` schedules; stop at the first that violates an invariant.
    ``depth``/``k``: PCT's bug depth and change-point horizon (default: the strategy's)."""
    strategy_for(strategy, 0)  # a bad name fails before any run
    rng = random.Random(seed)
    for i in range(schedules):
        outcome = run_once(scenario, profile,
                           strategy_for(strategy, rng.getrandbits(32), depth, k, i),
                           env, max_steps=max_steps)
        if not outcome.ok:
            return Exploration(scenario, profile, i + 1, outcome)
    return Exploration(scenario, profile, schedules, None)


def replay(token: str, max_steps: int = DEFAULT_MAX_STEPS, record_trace: bool = False) -> Outcome:
    fields = decode_token(token)
    scenario = str(fields.get("sc", ""))
    profile = str(fields.get("pr", "rfc"))
    env = fields.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError("replay token field 'env' must be an object")
    pinned = bool(fields.get("pin"))
    strategy = RoundRobin() if pinned and fields.get("st") == "script" else make_strategy(fields)
    return run_once(scenario, profile, strategy, {str(k): str(v) for k, v in env.items()},
                    pinned=pinned, max_steps=max_steps, record_trace=record_trace)
