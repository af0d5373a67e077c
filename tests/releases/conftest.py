"""Fixtures of the release-environment tests.

Tests marked ``release`` use real Mooncake releases from PyPI, installed into the user's cache
(``scripts/setup.sh`` pre-installs 0.3.11.post1 to 0.3.14, so CI finds them there); see
release_choice.py for which releases and what happens offline. The others install a fake
release from a local wheel into a private cache.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_release import build_engine, build_wheel, offline_pip_env
from release_choice import skip_or_fail_unreachable

from pytest_mooncake.releases import ReleaseEnv, ReleaseFetchError, ensure_env, envs, loader
from pytest_mooncake.releases.standins import STAND_INS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "release: uses real Mooncake releases from PyPI (installed once into the "
        "cache; MC_TEST_RELEASES picks the releases)")


@pytest.fixture(scope="session")
def real_release() -> Callable[[str], ReleaseEnv]:
    """``real_release("0.3.14")``: the release's environment in the user's cache."""
    cache: dict[str, ReleaseEnv] = {}

    def get(text: str) -> ReleaseEnv:
        if text not in cache:
            try:
                cache[text] = ensure_env(text)
            except ReleaseFetchError as exc:
                if not exc.unreachable:
                    raise
                skip_or_fail_unreachable(exc)
        return cache[text]

    return get


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``MC_CACHE_DIR`` (environments, stand-ins) for this test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MC_CACHE_DIR", str(root))
    envs._plan.cache_clear()
    loader._dlopen.cache_clear()
    yield root
    envs._plan.cache_clear()
    loader._dlopen.cache_clear()


@pytest.fixture(scope="session")
def link_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``libcuda.so.1`` to link fake releases against (the stand-in's source, compiled here
    and never put on any search path)."""
    out = tmp_path_factory.mktemp("link") / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), "-Wl,-soname,libcuda.so.1",
                    str(STAND_INS["libcuda.so.1"].source_path)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def fake_wheels(tmp_path_factory: pytest.TempPathFactory, link_libcuda: Path) -> Path:
    """A find-links directory with fake releases: non-cuda 0.0.1 (imports cuInit only),
    non-cuda 0.0.2 (also imports cuNotInTheStandIn) and cuda13 0.0.3 (only in that flavour)."""
    base = tmp_path_factory.mktemp("wheels")
    build_wheel(base / "index", "0.0.1", build_engine(base / "engine1.so", link_libcuda))
    build_wheel(base / "index", "0.0.2",
                build_engine(base / "engine2.so", link_libcuda, "cuNotInTheStandIn"))
    build_wheel(base / "index", "0.0.3", base / "engine1.so", flavour="cuda13")
    return base / "index"


@pytest.fixture
def offline_index(fake_wheels: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """pip in this test installs only from the fake wheels (no network at all)."""
    settings = offline_pip_env(fake_wheels)
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    return settings


@pytest.fixture
def no_real_libcuda() -> None:
    """Skip where this machine has a real CUDA driver (the stand-in is then rightly unused)."""
    real = loader.system_libraries(["libcuda.so.1"])["libcuda.so.1"]
    if real:
        pytest.skip(f"this machine has a real libcuda.so.1 ({real}); the stand-in is not used")
