"""The engine's connection counters (MR-16's "no endpoint leak"): connections to peers that are
still open wherever they are held, those to a replaced instance, sessions on our data port."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from reference_engine.profiles import RFC


class EachEngineAnIncarnation:
    """Every engine of this test process publishes its own instance_id (as separate processes
    would)."""

    def instance_id(self, mint=None) -> str:
        return uuid.uuid4().hex


PROFILE = dataclasses.replace(RFC, identity=EachEngineAnIncarnation())
"""RFC with an identity per engine."""


@pytest.fixture
def engines(engines):
    """Every engine its own incarnation (PROFILE), as separate processes would be."""
    return lambda name: engines(name, PROFILE)


def counts(engine):
    s = engine.stats()
    return s["peer_connections"], s["peer_connections_stale"]


def test_counts_open_connections_and_those_to_a_replaced_instance(engines):
    a, b = engines("a"), engines("b")
    assert counts(b) == (0, 0) and a.stats()["data_sessions"] == 0
    assert b.write("a", 0, b"hello").ok
    assert counts(b) == (1, 0)
    assert a.stats()["data_sessions"] == 1
    old = b.lookup("a").data_endpoint()
    pooled = b.transport.pool.acquire(*old)  # the idle one
    held = b.transport.pool.acquire(*old)  # a new one that no pool list holds, as a leak would
    b.transport.pool.release(pooled, True)
    assert counts(b) == (2, 0)

    a.transport.stop()
    a2 = engines("a")
    assert b.lookup("a", force=True).data_endpoint() != old
    assert b.stats()["replacements"] == 1
    # the idle pooled connection was closed on retirement; the held one is still open
    assert counts(b) == (1, 1)
    held.close()
    assert counts(b) == (0, 0)
    assert b.write("a", 0, b"again").ok and a2.local_read(0, 5) == b"again"
    assert counts(b) == (1, 0)
    assert a2.stats()["data_sessions"] == 1
