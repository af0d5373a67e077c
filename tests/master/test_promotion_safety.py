"""Planted bad memory descriptor (MP-1, MP-2, MP-3) and snapshot restore (MP-9), multi-process."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets.reference.masters import put_keys
from pytest_mooncake.waits import TRANSIENT, wait_until


def planted_cluster(cluster_factory, profile, **options):
    cluster = cluster_factory(profile, masters=2, clients=1, warmup=0, **options)
    keys = put_keys(cluster.client(0), 40)
    leader = cluster.leader()
    (standby,) = cluster.standbys()
    seq = cluster.plant_bad_descriptor("k3")
    wait_until(lambda: cluster.promotable(standby)["applied_seq"] >= seq, 10, "standby applied the plant", ignore=TRANSIENT)
    return cluster, keys, leader, standby


@pytest.mark.mc_req("MP-1", "MP-3", "MP-5")
def test_bad_descriptor_fails_the_dry_run_and_the_leader_stays(cluster_factory):
    cluster, keys, leader, standby = planted_cluster(cluster_factory, "rfc")
    p = cluster.promotable(standby)
    assert p["promotable"] is False
    assert p["validation"]["ok"] is False and p["validation"]["dropped_entries"] >= 1
    assert "overlapping memory descriptors" in p["reason"]
    assert p["applied_seq"] == p["primary_seq"]
    assert cluster.metrics(standby)["ha_oplog_standby_lag"] == 0
    status, body = cluster.promote(standby)
    assert status == 409 and body["refused"], body
    assert cluster.leader() == leader
    assert sorted(cluster.keys(leader)) == sorted(keys)
    assert cluster.metrics(standby)["ha_promotions_refused_total"] >= 1
    assert cluster.client(0).put("still-writable")["ok"]


@pytest.mark.mc_req("MP-2")
def test_partial_restore_drops_only_the_bad_entry(cluster_factory):
    cluster, keys, leader, standby = planted_cluster(cluster_factory, "rfc", partial_restore=True)
    status, body = cluster.promote(standby)
    assert status == 200, body
    assert cluster.leader() == standby
    assert sorted(cluster.keys(standby)) == sorted(keys)
    assert cluster.metrics(standby)["ha_restore_dropped_entries"] >= 1


def test_legacy_promotes_then_one_bad_entry_empties_the_index(cluster_factory):
    cluster, keys, leader, standby = planted_cluster(cluster_factory, "legacy")
    assert cluster.promotable(standby)["promotable"] is True
    status, body = cluster.promote(standby)
    assert status == 200, body
    assert cluster.leader() == standby
    assert cluster.key_count(standby) == 0
    assert "Standby restore failed" in cluster.master_log(standby)


@pytest.mark.parametrize("profile", [pytest.param("rfc", marks=pytest.mark.mc_req("MP-9")), "legacy"])
def test_snapshot_restore_after_recreating_every_master(cluster_factory, profile):
    cluster = cluster_factory(profile, masters=2, clients=1, warmup=0, snapshots=True,
                              trim_oplog_after_snapshot=True)
    keys = put_keys(cluster.client(0), 50)
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == 50, 10, "standby caught up", ignore=TRANSIENT)
    snap = cluster.snapshot(standby)
    assert snap["objects"] == 50 and snap["trimmed_batches"] > 0
    for i in range(2):
        cluster.kill_master(i)
    fresh = cluster.start_master()
    assert cluster.leader(timeout=20) == fresh
    if profile == "rfc":
        assert sorted(cluster.keys(fresh)) == sorted(keys)
    else:
        assert "Snapshot restore succeeded: 50 objects" in cluster.master_log(fresh)
        assert cluster.key_count(fresh) == 0


@pytest.mark.mc_req("MP-4", "MP-9")
def test_trimmed_history_without_snapshot_is_not_promotable(cluster_factory, tmp_path):
    cluster = cluster_factory("rfc", masters=2, clients=1, snapshots=True,
                              trim_oplog_after_snapshot=True)
    put_keys(cluster.client(0), 10)
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == 10, 10, "standby caught up", ignore=TRANSIENT)
    cluster.snapshot(standby)
    cluster.snapshot_dir = None
    blind = cluster.start_master()
    p = wait_until(lambda: (lambda a: a if "missing" in a["reason"] else None)(cluster.promotable(blind)),
                 10, "blind standby reports the gap", ignore=TRANSIENT)
    assert p["promotable"] is False and p["keys_restorable"] == 0


@pytest.mark.mc_req("MP-1")
def test_leader_crash_with_a_bad_context_leaves_no_master_serving_an_empty_index(cluster_factory):
    cluster, keys, leader, standby = planted_cluster(cluster_factory, "rfc")
    cluster.kill_master(leader)
    wait_until(lambda: cluster.metrics(standby)["ha_promotions_refused_total"] >= 1, 15,
             "standby refuses to campaign", ignore=TRANSIENT)
    assert cluster.serving() == []
    assert cluster.promotable(standby)["promotable"] is False
    assert "refusing to campaign" in cluster.master_log(standby)


def test_a_planted_removal_reaches_the_standby_not_the_leader(cluster_factory):
    """``plant_removal``: the standby replays the removal (the promoted standby lacks the key),
    the leader never applied it (it still serves the key until it is killed)."""
    cluster = cluster_factory("rfc", masters=2, clients=1, warmup=0)
    keys = put_keys(cluster.client(0), 4)
    leader = cluster.leader()
    (standby,) = cluster.standbys()
    seq = cluster.plant_removal("k3")
    wait_until(lambda: cluster.promotable(standby)["applied_seq"] >= seq, 10,
               "standby applied the planted removal", ignore=TRANSIENT)
    assert "k3" in cluster.keys(leader)
    status, body = cluster.promote(standby)
    assert status == 200, body
    assert sorted(cluster.keys(standby)) == sorted(k for k in keys if k != "k3")
