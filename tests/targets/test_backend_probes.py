"""Which backends real builds take, asked of the builds (``targets/mooncake/backend_probes``):
the answers are what the build itself said, and the target turns a refusal into n/a with it."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets import TargetContext, TargetLacks, resolve_target
from pytest_mooncake.targets.base import Capability
from pytest_mooncake.targets.mooncake.backend_probes import (
    engine_accepts,
    forget_answers,
    master_accepts,
)

RELEASES = ("0.3.13.post1", "0.3.14")


@pytest.fixture(params=RELEASES)
def release_target(request, mc_etcd, mc_redis, tmp_path):
    target = resolve_target(f"mooncake=={request.param}")
    reason = target.missing("engine")
    if reason:
        pytest.skip(f"n/a: {reason}")
    forget_answers()
    target.open(TargetContext(seed=1, workdir=tmp_path, options={"ha": "redis"},
                              etcd_endpoints=lambda: list(mc_etcd.endpoints),
                              redis_address=lambda: mc_redis.address))
    try:
        yield target
    finally:
        target.close()
        forget_answers()


def test_an_engine_probe_tells_a_taken_backend_from_a_refused_one(release_target, mc_etcd,
                                                                  mc_redis, tmp_path):
    install = release_target.placement.install
    etcd = engine_accepts(install, mc_etcd.uri, tmp_path)
    assert etcd.accepted, etcd.answer
    redis = engine_accepts(install, mc_redis.uri, tmp_path)
    # the PyPI wheels are built without USE_REDIS: the plugin factory aborts on the scheme
    assert not redis.accepted
    assert "Unable to find metadata storage plugin redis" in redis.answer, redis.answer


def test_a_build_without_redis_metadata_is_na_with_its_own_words(release_target):
    with pytest.raises(TargetLacks) as lack:
        release_target.metadata_store("redis")
    assert lack.value.capability == Capability.METADATA_REDIS
    assert "Unable to find metadata storage plugin redis" in str(lack.value)


def test_masters_on_redis_ha_are_na_with_what_the_master_answered(release_target, mc_redis,
                                                                   tmp_path):
    answer = master_accepts(release_target.placement.install, "redis", mc_redis.uri, tmp_path)
    assert not answer.accepted
    assert "UNAVAILABLE_IN_CURRENT_MODE" in answer.answer, answer.answer
    with pytest.raises(TargetLacks) as lack:
        release_target.master_cluster(masters=2, clients=0)
    assert lack.value.capability == Capability.HA_REDIS
    assert "UNAVAILABLE_IN_CURRENT_MODE" in str(lack.value)


@pytest.mark.parametrize("kind", ["http", "http:reference"])
def test_a_build_publishes_to_and_reads_from_either_http_server(release_target, kind):
    """The build's engines on the wheel's own HTTP metadata server and on the reference's (the
    same API, another implementation): each publishes, and one writes into the other."""
    store = release_target.metadata_store(kind)
    engines = []
    try:
        for name in ("a", "b"):
            engines.append(release_target.start_engine(f"http-{name}", store))
        a, b = engines
        assert store.get(store.segment_key(a.segment)), f"A published nothing on {store.uri}"
        result = b.write(a.segment, 0, b"over-http")
        assert result.ok, result.error
    finally:
        for engine in engines:
            engine.kill()
        store.close()


def test_p2p_handshake_is_asked_of_the_build_apart_from_etcd(release_target, mc_etcd, tmp_path):
    """``P2PHANDSHAKE`` has no scheme: its answer is kept apart from etcd's (both are asked),
    and the store-less handle carries what the build answered."""
    install = release_target.placement.install
    assert engine_accepts(install, mc_etcd.uri, tmp_path).accepted
    p2p = engine_accepts(install, "P2PHANDSHAKE", tmp_path)
    assert p2p.accepted and "'P2PHANDSHAKE'" in p2p.answer, p2p.answer
    store = release_target.metadata_store("p2p")
    try:
        assert store.kind == "p2p" and store.uri == "P2PHANDSHAKE"
        assert store.accepted == p2p.answer and store.directory.span == 3
    finally:
        store.close()
