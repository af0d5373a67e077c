"""Fixtures of the emulator's tests: a fabric of two emulated devices and peer processes on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from verbs_peers import HERE, PeerProcess

from pytest_mooncake.runtime.native import build_shared_library
from pytest_mooncake.verbs import EmulatedFabric, library_path


@pytest.fixture(scope="session")
def probe_library() -> Path:
    lib = library_path()
    return build_shared_library("libmcverbsprobe.so", [HERE / "probe.c"],
                                ldflags=[f"-L{lib.parent}", "-l:libibverbs.so.1"])


@pytest.fixture
def fabric(tmp_path_factory) -> Iterator[EmulatedFabric]:
    """Two devices in a run directory under pytest's temporary directory (so even a killed run
    leaves nothing pytest's own clean-up does not remove)."""
    run_dir = tmp_path_factory.mktemp("vf")
    with EmulatedFabric.create("mlx5_0,mlx5_1:numa=1", run_dir=run_dir, seed=20261201) as f:
        yield f


@pytest.fixture
def peers(fabric, probe_library, tmp_path) -> Iterator:
    """Factory: ``peers()`` starts a peer process on ``fabric``; all are killed at the end."""
    started: list[PeerProcess] = []

    def start(env: dict | None = None) -> PeerProcess:
        p = PeerProcess(fabric, probe_library, tmp_path / f"peer-{len(started)}.log", env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


