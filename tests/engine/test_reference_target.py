"""The reference target wires its engine and metadata handles into the plugin's fixtures."""

from __future__ import annotations

import math

import pytest

from pytest_mooncake.targets.base import Capability, EngineHandle, MetadataHandle, TargetError
from pytest_mooncake.targets.reference import ReferenceTarget
from reference_engine.cache_policies import DEFAULT_TTL_MS


@pytest.fixture(autouse=True)
def _reference_only(mc_target):
    if not isinstance(mc_target, ReferenceTarget):
        pytest.skip("tests of the reference target itself")


def test_reference_target_declares_its_engine_capabilities(mc_target):
    for cap in (Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
                Capability.CACHE_CONTROL, Capability.ENGINE_COUNTERS,
                Capability.METADATA_ETCD, Capability.METADATA_HTTP, Capability.METADATA_REDIS):
        assert mc_target.missing(cap) is None


@pytest.mark.parametrize("mc_metadata", ["etcd", "redis", "http"], indirect=True)
def test_mc_engine_starts_reference_engines(mc_engine, mc_metadata, tmp_path):
    assert isinstance(mc_metadata, MetadataHandle)
    a = mc_engine(f"{tmp_path.name}-a", buffer_size=1 << 16)
    b = mc_engine(f"{tmp_path.name}-b", ttl_ms=50)
    assert isinstance(a, EngineHandle) and a.alive() and a.pid
    assert b.write(a.segment, 0, b"hi").ok
    assert b.read(a.segment, 0, 2).data == b"hi"
    assert a.descriptor()["name"] == a.segment
    assert a.buffers()[0][1] == 1 << 16
    assert b.lookup(a.segment, force=True).ok
    assert not b.lookup("nobody").ok
    b.set_ttl_ms(0)
    assert {"refresh_ok", "replacements", "endpoints_retired",
            "retries_exhausted"} <= set(b.stats())
    assert "published" in a.logs()


def test_an_engine_reports_the_ttl_it_runs_with_and_refuses_one_below_zero(mc_engine, tmp_path):
    """``cache_ttl_ms`` is how long an engine serves a remote descriptor at most, as it runs;
    the suites scale their waits by it. A reference engine reports the TTL it started with (the
    profile's default, or ``ttl_ms``), then the one set while it runs. A TTL below 0, even a
    hair below (-0.5 ms), or NaN means nothing: it is refused naming the setting and the value,
    and the TTL in force stays (no requirement speaks of one; bad input gets a clear error)."""
    default = mc_engine(f"{tmp_path.name}-d")
    b = mc_engine(f"{tmp_path.name}-b", ttl_ms=250)
    assert (default.cache_ttl_ms, b.cache_ttl_ms) == (DEFAULT_TTL_MS, 250)
    b.set_ttl_ms(0)
    assert b.cache_ttl_ms == 0
    for bad in (-0.5, math.nan):
        with pytest.raises(TargetError, match=rf"metadata_cache_ttl_ms must be >= 0, got {bad}"):
            b.set_ttl_ms(bad)
    assert b.cache_ttl_ms == 0, "a refused TTL changed the one in force"


def test_a_redis_engine_publishes_mooncakes_json_as_a_plain_string(mc_engine, mc_redis,
                                                                   tmp_path):
    """On ``redis://`` the engine's descriptor is one Redis string under the etcd key name,
    holding the descriptor's JSON text, as Mooncake's Redis plugin writes it."""
    import json

    from pytest_mooncake.targets.reference.engines import RedisMetadataHandle

    store = RedisMetadataHandle(mc_redis.address)
    a = mc_engine(f"{tmp_path.name}-a", metadata=store)
    raw = mc_redis.client()
    key = store.segment_key(a.segment)
    assert key == f"mooncake/ram/{a.segment}"
    assert raw.type(key) == b"string"
    assert json.loads(raw.get(key))["name"] == a.segment
    a.stop()
    assert raw.get(key) is None, "a stopped engine left its descriptor in Redis"
    store.close()


def test_the_metadata_axis_picks_the_default_store(pytester):
    """``--mc-metadata`` (or the ini key) sets the store a test gets when it names none, and the
    target reports it among its deployment backends; a test that names its store keeps it."""
    pytester.makepyfile("""
        import pytest
        def test_default(mc_metadata, mc_target):
            print("KIND", mc_metadata.kind, mc_target.deployment_backends())
        @pytest.mark.parametrize("mc_metadata", ["etcd"], indirect=True)
        def test_named(mc_metadata):
            assert mc_metadata.kind == "etcd"
    """)
    result = pytester.runpytest_subprocess("-s", "--mc-metadata=redis", "--mc-ha=redis")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*KIND redis {'metadata': 'redis', 'ha': 'redis'}*"])
    pytester.makeini("[pytest]\nmc_metadata = http\n")
    result = pytester.runpytest_subprocess("-s")
    result.stdout.fnmatch_lines(["*KIND http {'metadata': 'http', 'ha': 'etcd'}*"])
    bad = pytester.runpytest_subprocess("--mc-metadata=zookeeper")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*--mc-metadata must be one of etcd, redis, http, http:reference, p2p (got 'zookeeper')*"])


def test_a_tests_planted_values_do_not_outlive_it(pytester):
    """``mc_engine`` deletes what is left under its engines' segment keys when the test ends:
    the store is shared by every test and matrix column of a worker, and a real build's engine
    will not start on a malformed value under its own name."""
    pytester.makepyfile("""
        def test_plants(mc_engine, mc_metadata):
            mc_engine("seg-left")
            mc_metadata.put(mc_metadata.segment_key("seg-left"), b"[1, 2]")
        def test_sees_nothing(mc_metadata):
            assert mc_metadata.get(mc_metadata.segment_key("seg-left")) is None
    """)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--mc-metadata=redis")
    result.assert_outcomes(passed=2)


def test_unknown_engine_options_are_named(mc_engine):
    from pytest_mooncake.targets.base import TargetError

    with pytest.raises(TargetError, match="warp_speed"):
        mc_engine("x", warp_speed=9)


@pytest.mark.parametrize("mc_metadata", ["etcd", "redis", "http"], indirect=True)
def test_metadata_through_a_proxy_address_keeps_raw_access_on_the_store(mc_metadata):
    from pytest_mooncake.runtime.ports import free_port

    proxy = f"127.0.0.1:{free_port()}"
    via = mc_metadata.through(proxy)
    assert proxy in via.uri and via.kind == mc_metadata.kind
    assert via.address == mc_metadata.address
    via.put("mooncake/ram/through-test", b"v")
    assert mc_metadata.get("mooncake/ram/through-test") == b"v"
    assert via.delete("mooncake/ram/through-test")


def test_engine_sockets_show_who_is_connected_to_whom(mc_engine, tmp_path):
    """``sockets()`` reads an engine's TCP sockets from /proc: after B wrote to A, one of B's
    sockets is the other end of one of A's (what the suites pair to find B's connections to a
    given process); a stopped engine has none."""
    a = mc_engine(f"{tmp_path.name}-a", buffer_size=1 << 16)
    b = mc_engine(f"{tmp_path.name}-b")
    assert b.write(a.segment, 0, b"hi").ok
    ends = {(s.local, s.remote) for s in a.sockets() if not s.listening}
    pairs = [s for s in b.sockets() if (s.remote, s.local) in ends]
    assert pairs and all(s.state == "ESTABLISHED" for s in pairs), (a.sockets(), b.sockets())
    assert any(s.listening and s.local[1] == a.descriptor()["tcp_data_port"] for s in a.sockets())
    a.stop()
    assert a.sockets() == []
