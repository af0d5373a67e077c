"""A forced lookup on the mooncake target: a fetch when nothing of the peer is cached,
``TargetLacks`` (forced_refresh) once the 0.3.13 engine may hold the peer's descriptor (it has no
forced refresh of one peer)."""

from __future__ import annotations

import os

import pytest

from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.targets.base import Capability


@pytest.fixture
def pair(mooncake_target, request):
    store = mooncake_target.metadata_store("etcd")
    tag = f"{os.getpid()}-{request.node.name}"
    a = mooncake_target.start_engine(f"fa-{tag}", store)
    b = mooncake_target.start_engine(f"fb-{tag}", store)
    yield a, b
    for engine in (b, a):
        engine.kill()
    store.close()


def test_forced_lookup_of_an_unopened_peer_is_a_fetch_and_lacks_once_opened(pair):
    a, b = pair
    first = b.lookup(a.segment, force=True)
    assert first.ok and first.descriptor["buffers"][0]["addr"] == a.buffers()[0][0]
    assert b.driver_stats()["lookups_ok"] == 1
    with pytest.raises(TargetLacks) as again:
        b.lookup(a.segment, force=True)
    assert again.value.capability is Capability.FORCED_REFRESH
    with pytest.raises(TargetLacks):
        b.lookup(b.segment, force=True)
    b.restart()
    assert b.lookup(a.segment, force=True).ok
    assert b.write(a.segment, 0, b"opened").ok
    with pytest.raises(TargetLacks):
        b.lookup(a.segment, force=True)
