"""Master clusters on the plugin's real etcd (or real Redis: ``cluster_factory(..., ha="redis")``),
torn down (every process reaped) after each test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster


@pytest.fixture
def cluster_factory(mc_etcd: Any, tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    made: list[ReferenceMasterCluster] = []

    def make(profile: str = "rfc", masters: int = 2, clients: int = 0, ha: str = "etcd",
             **options: Any) -> ReferenceMasterCluster:
        redis = request.getfixturevalue("mc_redis").address if ha == "redis" else None
        cluster = ReferenceMasterCluster([] if redis else mc_etcd.endpoints,
                                         tmp_path / f"cluster-{len(made)}", profile, masters,
                                         clients, redis=redis, **options)
        made.append(cluster)
        return cluster

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cluster in reversed(made):
        if failed is not None and failed.failed:
            print(cluster.logs())
        cluster.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    rep = yield
    if rep.when == "call":
        item.rep_call = rep
    return rep
