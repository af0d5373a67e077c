"""Fixtures for the external-target tests: a real Mooncake target opened on the session etcd."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_mooncake.targets import TargetContext, resolve_target
from pytest_mooncake.targets.mooncake.placements.this_host import MooncakeTarget


@pytest.fixture(scope="module")
def mooncake_target(mc_etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MooncakeTarget]:
    """``--mc-target=mooncake`` (the installed wheel), opened on ``mc_etcd``; tests needing the
    wheel skip when it is absent, with the target's own reason."""
    target = resolve_target("mooncake")
    reason = target.missing("engine")
    if reason:
        pytest.skip(f"n/a: {reason}")
    target.open(TargetContext(seed=1, workdir=tmp_path_factory.mktemp("mooncake-target"),
                              etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    try:
        yield target
    finally:
        target.close()
