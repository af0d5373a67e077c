"""The reference target hands out master clusters through the plugin's mc_master_cluster."""

from __future__ import annotations

from pytest_mooncake.targets.base import Capability
from pytest_mooncake.waits import wait_until


def test_master_cluster_through_the_target_api(mc_target, mc_master_cluster):
    for cap in (Capability.MASTER_CLUSTER, Capability.MASTER_SNAPSHOT,
                Capability.MASTER_FAULT_PLANTING):
        assert mc_target.missing(cap) is None
    cluster = mc_master_cluster(masters=2, clients=1, profile="legacy", warmup=0)
    assert cluster.profile == "legacy"
    leader = cluster.leader()
    assert cluster.client(0).put("k")["ok"]
    assert cluster.standbys() == [1 - leader]
    assert cluster.key_count(leader) == 1


def test_one_masters_etcd_traffic_through_a_fault_proxy(mc_master_cluster, mc_etcd, mc_faults):
    proxy, address = mc_faults.proxy("master-0-etcd", mc_etcd.endpoints[0])
    cluster = mc_master_cluster(masters=1, clients=0, master_etcd={0: address})
    assert cluster.leader() == 0
    proxy.disable()
    wait_until(lambda: cluster.serving() == [], 15, "master 0 to lose etcd behind its proxy")


def test_under_mc_ha_redis_the_masters_elect_and_replicate_in_redis(pytester):
    """``--mc-ha=redis``: the reference target's masters keep the leader hash and the OpLog in
    the session's Redis (Mooncake's keys), nothing in etcd, and a standby promoted after the
    leader's SIGKILL serves every acknowledged write."""
    pytester.makepyfile("""
        import json

        from pytest_mooncake.waits import wait_until

        def test_on_redis(mc_master_cluster, mc_redis, mc_etcd):
            cluster = mc_master_cluster(masters=2, clients=1)
            assert cluster.redis == mc_redis.address and cluster.etcd == []
            for i in range(5):
                assert cluster.client(0).put(f"k{i}")["ok"]
            raw = mc_redis.client()
            tag = "mooncake-store/{" + cluster.cluster_id + "}"
            view = raw.hgetall(tag + "/master_view")
            old = cluster.leader()
            assert view[b"leader_address"].decode() == cluster.masters[old].address
            assert raw.get(tag + "/oplog/producer_view") == view[b"view_version"]
            # the segment mount and the five puts
            assert json.loads(raw.get(tag + "/oplog/durable_prefix"))["last_seq"] >= 6
            etcd = mc_etcd.client()
            for prefix in ("mooncake-store/" + cluster.cluster_id, "/oplog/" + cluster.cluster_id):
                assert not list(etcd.get_prefix(prefix)), prefix
            cluster.wait_caught_up(1 - old)
            cluster.kill_master(old)
            new = cluster.leader(timeout=20)
            assert new == 1 - old
            wait_until(lambda: sorted(cluster.keys(new)) == [f"k{i}" for i in range(5)], 10,
                       "the new leader to hold every acknowledged write")
            assert int(raw.hget(tag + "/master_view", "view_version")) > int(view[b"view_version"])
            assert cluster.client(0).put("after")["ok"]
    """)
    result = pytester.runpytest_subprocess("--mc-ha=redis", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
