"""``mc_metadata`` and ``mc_engine``: metadata stores and transfer engines of the current target.

A suite writes ``a = mc_engine("seg-a")`` and gets an ``EngineHandle`` (see
``targets/base.py``) for a real process of whatever ``--mc-target`` names; every engine a test
started is stopped and reaped when the test ends, and its log is shown if the test fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_mooncake.logs import attach_log
from pytest_mooncake.targets.base import Capability, EngineHandle, MetadataHandle, Target

METADATA_KINDS = ("etcd", "http")


@pytest.fixture
def mc_metadata(request: pytest.FixtureRequest, mc_target: Target) -> Iterator[MetadataHandle]:
    """The metadata store engines of this test publish to: etcd by default; parametrize with
    ``@pytest.mark.parametrize("mc_metadata", ["etcd", "http"], indirect=True)``."""
    kind = getattr(request, "param", "etcd")
    if kind not in METADATA_KINDS:
        raise pytest.UsageError(
            f"mc_metadata takes one of {', '.join(METADATA_KINDS)} (got {kind!r})"
        )
    store = mc_target.metadata_store(kind)
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


class EngineFactory:
    """Starts engines of the current target; remembers them so teardown can reap them."""

    def __init__(self, request: pytest.FixtureRequest, target: Target, metadata: MetadataHandle):
        self.request = request
        self.target = target
        self.metadata = metadata
        self.engines: list[EngineHandle] = []

    def __call__(self, segment: str, metadata: MetadataHandle | None = None,
                 prefer_ttl_ms: int | None = None, **options: Any) -> EngineHandle:
        """Start an engine publishing ``segment``. Options the reference target understands:
        ``ttl_ms`` (metadata_cache_ttl_ms; a target without cache_control makes the test
        n/a), ``buffer_size``, ``profile`` (rfc/legacy), ``fixed_address``.
        ``prefer_ttl_ms`` sets the TTL where the target can, and otherwise runs the engine with
        its own caching: for tests that judge recovery, not the TTL itself."""
        if prefer_ttl_ms is not None and self.target.missing(Capability.CACHE_CONTROL) is None:
            options.setdefault("ttl_ms", prefer_ttl_ms)
        engine = self.target.start_engine(segment, metadata or self.metadata, **options)
        self.engines.append(engine)
        attach_log(self.request, f"engine {segment} log", engine.logs)
        return engine

    def stop_all(self) -> None:
        for engine in reversed(self.engines):
            try:
                engine.stop()
            except Exception:  # noqa: BLE001 (teardown keeps going; the supervisor reaps)
                engine.kill()


@pytest.fixture
def mc_engine(request: pytest.FixtureRequest, mc_target: Target,
              mc_metadata: MetadataHandle) -> Iterator[EngineFactory]:
    """Factory: ``mc_engine("seg-a", ttl_ms=200)`` starts an engine of the current target."""
    factory = EngineFactory(request, mc_target, mc_metadata)
    try:
        yield factory
    finally:
        factory.stop_all()
