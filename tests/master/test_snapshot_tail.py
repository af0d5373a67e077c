"""A standby started after a snapshot *and* after more writes: it must load the snapshot and
replay exactly the OpLog tail after the snapshot's last included sequence (not the whole
history, which is still in etcd here so a full replay would also have been possible), and end
with every key."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import TRANSIENT, wait_until


def put_keys(client, keys):
    for k in keys:
        assert client.put(k, 64)["ok"], k
    return list(keys)


@pytest.mark.mc_req("MP-4", "MP-9")
def test_new_standby_loads_the_snapshot_and_replays_only_the_tail(cluster_factory):
    cluster = cluster_factory("rfc", masters=2, clients=1, snapshots=True)
    client = cluster.client(0)
    early = put_keys(client, [f"early-{i}" for i in range(40)])
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == 40, 10, "standby caught up", ignore=TRANSIENT)
    snap = cluster.snapshot(standby)
    snap_seq = snap["last_included_seq"]
    assert snap["objects"] == 40 and snap["trimmed_batches"] == 0
    late = put_keys(client, [f"late-{i}" for i in range(25)])   # the tail: after the snapshot
    leader = cluster.leader()
    durable = int(cluster.metrics(leader)["ha_batch_record_durable_sequence"])
    assert durable >= snap_seq + 25

    fresh = cluster.start_master()
    p = cluster.wait_caught_up(fresh, timeout=20)
    metrics = cluster.metrics(fresh)
    assert p["applied_seq"] == durable and p["promotable"] is True, p
    assert sorted(cluster.keys(fresh)) == sorted(early + late)
    # It started from the snapshot's sequence ...
    assert metrics["ha_standby_snapshot_sequence_id"] == snap_seq
    assert f"(seq {snap_seq}, 40 objects)" in cluster.master_log(fresh)
    # ... and applied exactly the entries after it: not one more (a full replay), not one less.
    assert metrics["ha_oplog_applied_entries_total"] == durable - snap_seq
    assert metrics["ha_oplog_applied_sequence_id"] == durable
