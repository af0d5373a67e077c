"""``mc_completions``: control over the RDMA completion path of targets that allow it.

The handle comes from ``Target.rdma``; a target without a controllable RDMA path raises
``TargetLacks`` and the test is n/a. Explorations use ``--mc-schedules``, ``--mc-strategy`` and
the test's seed; ``--mc-replay=TOKEN`` runs exactly one recorded schedule. A failing exploration's
replay token is printed with the failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_mooncake.options import McConfig
from pytest_mooncake.targets.base import RdmaHandle, Target

REPLAY_TOKENS = pytest.StashKey[list[str]]()


@pytest.fixture
def mc_completions(request: pytest.FixtureRequest, mc_target: Target, mc_config: McConfig,
                   mc_seed: int) -> Iterator[Any]:
    handle: RdmaHandle = mc_target.rdma(
        seed=mc_seed, schedules=mc_config.schedules, strategy=mc_config.strategy,
        replay=mc_config.replay, verbs=mc_config.verbs,
    )
    try:
        yield handle
    finally:
        close = getattr(handle, "close", None)
        if close is not None:
            close()
