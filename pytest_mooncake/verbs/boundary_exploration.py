"""Explorations at the verbs boundary: many schedules of one scenario, replay tokens.

The strategies and the token format come from a ``StrategySource`` (the reference scheduler's,
``pytest_mooncake/targets/reference/schedule_strategies.py``). A scenario
(``BoundaryScenario``) runs one schedule of a real build under a strategy or a
replayed label sequence and says what it observed and which invariants it broke. ``explore``
runs up to N schedules with the reference scheduler's strategies (``mix``, ``pct``,
``random``; one seed drives them) and stops at the first violation; every schedule has a token
(``mcs1.`` like the reference engine's, with ``"v": "verbs"``) that ``replay`` runs again
against the same build.
"""

from __future__ import annotations

import base64
import random
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_mooncake.verbs.boundary_scheduler import ScheduleRun

TOKEN_KIND = "verbs"
DEFAULT_SCHEDULES = 40
"""Schedules an exploration runs on a real build by default: each is one transfer (one run of
a small program); at about 10 schedules/s on the 2-core CI machine that is a few seconds."""


@dataclass
class ScheduleOutcome:
    run: ScheduleRun
    violations: list[str]
    observed: str  # what the scenario saw (the program's or engine's own words, data checks)
    params: dict = field(default_factory=dict)  # the strategy's fields (name, seed, ...)
    token: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, replay_command: str = "") -> str:
        """The failure message: what broke, the token, the replay command, what was observed
        and the schedule's trace of verbs calls."""
        lines = [*self.violations, f"schedule token: {self.token}"]
        if replay_command:
            lines.append(f"replay: {replay_command}")
        lines += ["observed:", self.observed.rstrip() or "  (nothing)", "verbs-call trace:",
                  *self.run.trace]
        if self.run.stopped:
            lines.append(f"(schedule stopped: {self.run.stopped})")
        return "\n".join(lines)


class TokenError(ValueError):
    """A replay token that is not a verbs-boundary schedule of this scenario and build."""


class StrategySource(Protocol):
    names: Sequence[str]

    def strategy(self, name: str, seed: int, index: int) -> Any: ...
    def encode(self, fields: dict[str, Any]) -> str: ...
    def decode(self, token: str) -> dict[str, Any]: ...


class BoundaryScenario(Protocol):
    name: str
    build: str  # which build it runs (a release, a program's path and mode): a token's target
    independent: bool
    """True: every schedule starts from scratch (a new process). False: schedules share
    processes (an engine pair), so schedule n starts where n-1 left the build (endpoints made
    or retired): a replay first runs the exploration's schedules before it again."""

    def run_schedule(self, strategy, replay: Sequence[str] | None) -> ScheduleOutcome: ...


@dataclass
class BoundaryExploration:
    scenario: str
    schedules: int  # schedules run
    distinct: int  # distinct label sequences among them
    seconds: float
    failure: ScheduleOutcome | None

    @property
    def found(self) -> bool:
        return self.failure is not None

    def summary(self) -> str:
        verdict = "violation" if self.failure else "no violation"
        return (f"{self.scenario}: {self.schedules} schedules ({self.distinct} distinct) in "
                f"{self.seconds:.1f} s, {verdict}")


def _pack(labels: Sequence[str]) -> str:
    raw = zlib.compress("\n".join(labels).encode(), 9)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unpack(text: str) -> list[str]:
    raw = zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    return raw.decode().split("\n") if raw else []


def token_for(source: StrategySource, scenario: BoundaryScenario, outcome: ScheduleOutcome,
              exploration: dict | None = None) -> str:
    """``exploration``: {"st", "seed", "n"}: the strategy and seed of the exploration and the
    schedule's number in it (a replay of a scenario whose schedules share processes runs the
    n-1 before it first)."""
    return source.encode({"v": TOKEN_KIND, "sc": scenario.name, "b": scenario.build,
                         "st": "labels", "l": _pack(outcome.run.labels),
                         "from": outcome.params, "x": exploration or {}})


def read_token(source: StrategySource, token: str,
               scenario: BoundaryScenario) -> tuple[list[str], dict]:
    """The label sequence of a verbs-boundary token made for ``scenario``'s build; a clear
    error for a token of another kind, scenario or build."""
    fields = source.decode(token)
    if fields.get("v") != TOKEN_KIND:
        raise TokenError("this replay token is not a verbs-boundary schedule (it has no "
                            "\"v\": \"verbs\"; reference-engine tokens replay on the reference)")
    if fields.get("sc") != scenario.name:
        raise TokenError(f"replay token is for scenario {fields.get('sc')!r}, not "
                            f"{scenario.name!r}")
    if fields.get("b") != scenario.build:
        raise TokenError(f"replay token was recorded against {fields.get('b')!r}; this run "
                            f"is {scenario.build!r} (a schedule replays on the build it ran on)")
    x = fields.get("x") or {}
    if not isinstance(x, dict):
        raise TokenError("replay token field 'x' must be an object")
    try:
        return _unpack(str(fields["l"])), x
    except (KeyError, ValueError, zlib.error) as exc:
        raise TokenError(f"replay token's label sequence is corrupt: {exc}") from None


def explore(source: StrategySource, scenario: BoundaryScenario,
            schedules: int = DEFAULT_SCHEDULES, strategy: str = "mix",
            seed: int = 0) -> BoundaryExploration:
    """Up to ``schedules`` schedules; stops at the first that violates an invariant."""
    if strategy not in source.names:
        raise ValueError(f"strategy must be one of {', '.join(source.names)}, got {strategy!r}")
    if schedules < 1:
        raise ValueError(f"schedules must be >= 1, got {schedules}")
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    start = time.monotonic()
    for i in range(schedules):
        chosen = source.strategy(strategy, rng.getrandbits(32), i)
        outcome = scenario.run_schedule(chosen, None)
        outcome.params = chosen.params()
        outcome.token = token_for(source, scenario, outcome,
                                  {"st": strategy, "seed": seed, "n": i + 1})
        seen.add(tuple(outcome.run.labels))
        if not outcome.ok:
            return BoundaryExploration(scenario.name, i + 1, len(seen),
                                       time.monotonic() - start, outcome)
    return BoundaryExploration(scenario.name, schedules, len(seen), time.monotonic() - start,
                               None)


def replay(source: StrategySource, scenario: BoundaryScenario, token: str) -> ScheduleOutcome:
    """Run the token's schedule again (after the schedules before it in its exploration, where
    the scenario's schedules share processes)."""
    labels, x = read_token(source, token, scenario)
    if not scenario.independent and int(x.get("n", 1)) > 1:
        rng = random.Random(int(x.get("seed", 0)))
        for i in range(int(x["n"]) - 1):
            scenario.run_schedule(source.strategy(str(x.get("st", "mix")), rng.getrandbits(32),
                                                  i), None)
    outcome = scenario.run_schedule(None, labels)
    outcome.params = {"st": "labels"}
    outcome.token = token
    return outcome
