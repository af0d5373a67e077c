"""Run scenarios under a strategy, check CO-9, explore many schedules, replay tokens."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    token: str
    exact_token: str
    stats: dict[str, int] = field(default_factory=dict)
    trace: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


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
    violations = run.checker.check_final(result.quiescent, result.crash)
    base = {"sc": scenario, "pr": profile, **_env_fields(env)}
    if pinned:
        base["pin"] = 1
    token = encode_token({**base, **strategy.params()})
    exact = encode_token({**base, **Replay(result.choices).params()})
    return Outcome(scenario, profile, violations, result.steps, result.quiescent, token, exact,
                   dict(run.initiator.stats), result.trace)


def strategy_for(name: str, seed: int, depth: int = 2, k: int = 60):
    if name == "pct":
        return PCT(seed, depth, k)
    if name == "random":
        return RandomWalk(seed)
    raise ValueError(f"strategy must be 'pct' or 'random', got {name!r}")


@dataclass
class Exploration:
    scenario: str
    profile: str
    schedules: int
    failure: Outcome | None

    @property
    def found(self) -> bool:
        return self.failure is not None


def explore(scenario: str, profile: str, schedules: int, strategy: str = "pct",
            seed: int = 0, depth: int = 2, k: int = 60, env: Mapping[str, str] | None = None,
            max_steps: int = DEFAULT_MAX_STEPS) -> Exploration:
    """Run up to ``schedules`` schedules; stop at the first that violates an invariant."""
    rng = random.Random(seed)
    for i in range(schedules):
        outcome = run_once(scenario, profile, strategy_for(strategy, rng.getrandbits(32), depth, k),
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
