"""``mc_master_cluster``: HA masters and store clients of the current target on ``mc_etcd``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_mooncake.logs import attach_log
from pytest_mooncake.targets.base import MasterClusterHandle, Target


class MasterClusterFactory:
    def __init__(self, request: pytest.FixtureRequest, target: Target):
        self.request = request
        self.target = target
        self.clusters: list[MasterClusterHandle] = []

    def __call__(self, masters: int = 2, clients: int = 1, **options: Any) -> MasterClusterHandle:
        """Start ``masters`` masters and ``clients`` store clients; options go to the target
        (e.g. ``profile``, ``snapshots=True``, ``lease_ttl``)."""
        cluster = self.target.master_cluster(masters=masters, clients=clients, **options)
        self.clusters.append(cluster)
        logs = getattr(cluster, "logs", None)
        if logs is not None:
            attach_log(self.request, "master cluster logs", logs)
        return cluster

    def close(self) -> None:
        for cluster in reversed(self.clusters):
            close = getattr(cluster, "close", None)
            if close is not None:
                close()


@pytest.fixture
def mc_master_cluster(request: pytest.FixtureRequest, mc_target: Target
                      ) -> Iterator[MasterClusterFactory]:
    """Factory: ``cluster = mc_master_cluster(masters=2, clients=1)``; torn down after the test."""
    factory = MasterClusterFactory(request, mc_target)
    try:
        yield factory
    finally:
        factory.close()
