"""Fixtures of the toxiproxy tests: real upstream servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from toxi_net import Upstream


@pytest.fixture
def echo() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture
def make_upstream() -> Iterator[Callable[..., Upstream]]:
    made: list[Upstream] = []

    def make(greeting: bytes = b"", mode: str = "echo") -> Upstream:
        made.append(Upstream(greeting, mode))
        return made[-1]

    yield make
    for server in made:
        server.close()


