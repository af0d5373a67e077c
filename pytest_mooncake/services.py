"""The lifecycle shared by session fixtures that run a server of their own (etcd, the fault
proxy): show its log on failures, start it or fail the tests that need it with the reason,
and always close it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

import pytest

from pytest_mooncake.logs import attach_fixture_log


class OwnedService(Protocol):
    def start(self) -> Any: ...
    def close(self) -> None: ...
    def log_text(self) -> str: ...


S = TypeVar("S", bound=OwnedService)


def serve(config: pytest.Config, fixturename: str, title: str, service: S,
          unavailable: type[Exception]) -> Iterator[S]:
    """Yield ``service`` started; ``unavailable`` from ``start`` fails each test using it with
    that one-line message (no traceback)."""
    attach_fixture_log(config, fixturename, title, service.log_text)
    try:
        service.start()
    except unavailable as exc:
        service.close()
        failure = str(exc)
    else:
        failure = None
    if failure is not None:
        # Raised outside the except block: no "During handling of the above exception" chain
        # repeating the message in every test's report.
        pytest.fail(failure, pytrace=False)
    try:
        yield service
    finally:
        service.close()
