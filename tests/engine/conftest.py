"""In-process engines on an in-memory metadata store (or an HTTP one), stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reference_engine.engine import Engine
from reference_engine.metadata import MetadataStore
from reference_engine.metadata.http_server import MetadataHttpServer
from reference_engine.metadata.http_store import HttpStore
from reference_engine.metadata.memory_store import MemoryStore
from reference_engine.profiles import RFC


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[MetadataStore]:
    """In memory; ``"http"`` by indirect parametrization: a reference HTTP metadata server with
    Mooncake's rules (an ``rpc_meta`` key is re-put only with an identical body)."""
    if getattr(request, "param", "memory") == "memory":
        yield MemoryStore()
        return
    server = MetadataHttpServer().start()
    try:
        yield HttpStore(server.url)
    finally:
        server.stop()


@pytest.fixture
def engines(store: MetadataStore) -> Iterator[Callable[..., Engine]]:
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
