"""In-process engines on an in-memory metadata store, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reference_engine.engine import Engine
from reference_engine.metadata.memory_store import MemoryStore
from reference_engine.profiles import RFC


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def engines(store: MemoryStore) -> Iterator[Callable[..., Engine]]:
    """``engines(name, profile=RFC, **kw)``: a started engine with a 64 KiB buffer."""
    started: list[Engine] = []

    def start(name: str, profile: Any = RFC, **kw: Any) -> Engine:
        engine = Engine(name, store, profile, buffer_size=1 << 16, **kw)
        engine.start()
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.transport.stop()
