"""Leader election on a real Redis with the semantics of Mooncake's RedisLeaderCoordinator:
one leader at a time, a view version that only grows, renew and release only by the owner, and
a leader that never counts itself valid after Redis could have expired its lease (also over a
slow link)."""

from __future__ import annotations

import uuid

import pytest

from pytest_mooncake.runtime.redis_process import redis_client
from pytest_mooncake.waits import wait_until
from reference_engine.master.redis_election import (
    RedisLeaderElection,
    master_view_key,
    view_version_key,
)


@pytest.fixture
def cluster(mc_redis):
    name = f"elect-{uuid.uuid4().hex[:8]}"
    yield name
    client = mc_redis.client()
    client.delete(master_view_key(name), view_version_key(name))
    client.close()


def test_keys_are_the_coordinators_with_the_cluster_as_hash_tag():
    assert master_view_key("mooncake_cluster") == "mooncake-store/{mooncake_cluster}/master_view"
    assert view_version_key("a{b}/") == "mooncake-store/{a_b_}/master_view_version"


def test_one_leader_a_growing_view_version_and_owner_only_release(mc_redis, cluster):
    client = mc_redis.client()
    first = RedisLeaderElection(client, cluster, "127.0.0.1:1", ttl=5).try_acquire()
    assert first is not None and first.valid()
    assert RedisLeaderElection(client, cluster, "127.0.0.1:2", ttl=5).try_acquire() is None
    raw = client.hgetall(master_view_key(cluster))
    assert raw[b"leader_address"] == b"127.0.0.1:1"
    assert int(raw[b"view_version"]) == first.view_version
    assert 0 < client.pttl(master_view_key(cluster)) <= 5000
    # another owner's token neither renews nor releases the hash
    client.hset(master_view_key(cluster), "owner_token", "someone-else")
    assert not first.keepalive() and not first.valid()
    first.release()
    assert client.exists(master_view_key(cluster)), "release deleted a hash it no longer owned"
    client.delete(master_view_key(cluster))
    second = RedisLeaderElection(client, cluster, "127.0.0.1:2", ttl=5).try_acquire()
    assert second is not None and second.view_version > first.view_version
    assert RedisLeaderElection(client, cluster, "x", ttl=5).current().address == "127.0.0.1:2"
    second.release()
    assert not client.exists(master_view_key(cluster))
    client.close()


def test_slow_acquisition_does_not_stretch_the_lease_past_redis(mc_redis, mc_faults, cluster):
    proxy, via = mc_faults.proxy("slow-redis", mc_redis.address)
    slow = redis_client(via, timeout=10.0)
    direct = mc_redis.client()
    try:
        election = RedisLeaderElection(slow, cluster, "127.0.0.1:1", ttl=3, margin=0.3)
        slow.ping()                                      # connection up before the link slows
        proxy.add_toxic(type="latency", attributes={"latency": 700})
        session = election.try_acquire()
        assert session is not None, "the election over a slow link did not acquire"
        wait_until(lambda: not direct.exists(master_view_key(cluster)), 20,
                   "Redis to expire the leader's hash")
        assert not session.valid(), \
            "Redis has expired the lease but its holder still counts itself the leader"
    finally:
        slow.close()
        direct.close()


def test_a_dead_redis_is_a_failed_renewal_not_an_error(mc_redis, cluster):
    client = mc_redis.client(timeout=1.0)
    session = RedisLeaderElection(client, cluster, "127.0.0.1:1", ttl=5).try_acquire()
    assert session is not None
    mc_redis.stop()
    try:
        assert session.keepalive() is False
        session.release()                                # best effort: no exception
    finally:
        mc_redis.start()
        client.close()
