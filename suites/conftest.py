"""Shared helpers of the conformance suites: only fixtures and the Target API, never an
implementation. Every helper here works for any target."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_mooncake.targets import MetadataHandle

WAIT = 10.0
"""Deadline (s) for liveness waits: something the requirement says must eventually happen."""


def short(instance_id: str | None) -> str:
    return f"{instance_id[:8]}.." if instance_id else "none"


@pytest.fixture
def proxied_metadata(mc_faults: Any, mc_metadata: MetadataHandle) -> tuple[Any, MetadataHandle]:
    """(proxy, metadata handle through it): engines started with the handle reach the store
    only through the proxy, so a test can cut or slow their metadata traffic."""
    proxy, address = mc_faults.proxy("metadata", mc_metadata.address)
    return proxy, mc_metadata.through(address)
