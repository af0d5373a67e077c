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
