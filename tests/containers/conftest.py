"""Fixtures for tests against a real container engine (Podman here, started by the run; the
tests skip with the probe's reason where none can be had)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_mooncake.container_engine.session_engine import (
    ContainerEngine,
    EngineUnavailable,
    probe,
)

TINY_IMAGE = "localhost/mc-test-sleep:1"


@pytest.fixture(scope="session")
def container_engine() -> Iterator[ContainerEngine]:
    reason = probe()
    if reason:
        pytest.skip(f"n/a: {reason}")
    engine = ContainerEngine()
    try:
        engine.start()
    except EngineUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield engine
    finally:
        engine.close()


def _with_libraries(program: str) -> list[Path]:
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    files = [Path(program)]
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            files.append(Path(path))
    return files


@pytest.fixture(scope="session")
def tiny_image(container_engine: ContainerEngine) -> str:
    """An image holding only this host's ``sleep`` and the libraries it links (a second to
    build; no registry, no debootstrap)."""
    with tempfile.TemporaryDirectory(prefix="mc-tiny-image-") as tmp:
        root = Path(tmp) / "rootfs"
        for f in _with_libraries(shutil.which("sleep") or "/bin/sleep"):
            target = root / str(f.resolve()).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f.resolve(), target)
            alias = root / str(f).lstrip("/")
            if alias != target and not alias.exists():
                alias.parent.mkdir(parents=True, exist_ok=True)
                alias.symlink_to(f.resolve())
        (Path(tmp) / "Containerfile").write_text("FROM scratch\nCOPY rootfs/ /\n")
        container_engine.client.images.build(path=tmp, dockerfile="Containerfile",
                                             tag=TINY_IMAGE, rm=True, network_mode="none")
    return TINY_IMAGE
