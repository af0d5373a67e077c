"""Fixtures of the master-RPC wire tests: a real release's ``mooncake_master`` alone on
loopback (installed once into the user's cache; a release pip cannot fetch offline is skipped
with pip's message, as the release tests do)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_mooncake.master_rpc.standalone import StandaloneMaster
from pytest_mooncake.releases import ReleaseEnv, ReleaseFetchError, ensure_env


@pytest.fixture(scope="session")
def release_env() -> Callable[[str], ReleaseEnv]:
    cache: dict[str, ReleaseEnv] = {}

    def get(version: str) -> ReleaseEnv:
        if version not in cache:
            try:
                cache[version] = ensure_env(version)
            except ReleaseFetchError as exc:
                if not exc.unreachable:
                    raise
                pytest.skip(f"{version} is not installed and pip cannot fetch it: {exc}")
        return cache[version]

    return get


@pytest.fixture
def real_master(release_env, tmp_path: Path) -> Iterator[Callable[[str], StandaloneMaster]]:
    """``real_master("0.3.14")``: that release's master, running; killed at teardown."""
    started: list[StandaloneMaster] = []

    def start(version: str) -> StandaloneMaster:
        master = StandaloneMaster(release_env(version), tmp_path / version)
        started.append(master)
        return master.__enter__()

    yield start
    for master in started:
        master.close()
