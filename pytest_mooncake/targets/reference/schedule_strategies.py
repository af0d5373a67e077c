"""The reference scheduler's strategies and replay tokens, lent to explorations of other
targets: the verbs boundary of a real build (``pytest_mooncake/verbs/boundary_exploration.py``)
takes them as a ``StrategySource``, so ``mix``, ``pct`` and ``random`` and the ``mcs1.`` tokens
are the same objects on every target. Only this package may import reference_engine."""

from __future__ import annotations

from typing import Any

from reference_engine.rdma.sim.exploration import STRATEGIES, strategy_for
from reference_engine.rdma.sim.scheduler import decode_token, encode_token


class ReferenceStrategies:
    names = STRATEGIES

    def strategy(self, name: str, seed: int, index: int) -> Any:
        return strategy_for(name, seed, index=index)

    def encode(self, fields: dict[str, Any]) -> str:
        return encode_token(fields)

    def decode(self, token: str) -> dict[str, Any]:
        return decode_token(token)


REFERENCE_STRATEGIES = ReferenceStrategies()
