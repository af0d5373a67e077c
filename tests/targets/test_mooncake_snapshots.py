"""Snapshots of real ``mooncake_master`` processes (MP-9's means): which means a build's probed
flags select, and a snapshot written and restored by the installed wheel's masters."""

from __future__ import annotations

import pytest

from pytest_mooncake.runtime.processes import http_ok
from pytest_mooncake.runtime.prometheus_text import parse_metrics
from pytest_mooncake.targets import TargetContext, TargetLacks, UnknownTarget
from pytest_mooncake.targets.base import Capability
from pytest_mooncake.targets.mooncake.master_cluster import snapshot_requests as master_snapshots
from pytest_mooncake.targets.mooncake.master_cluster.http_admin import admin_get
from pytest_mooncake.targets.mooncake.master_cluster.snapshot_requests import (
    OplogSnapshots,
    PeriodicSnapshots,
    lack,
    means_for,
)
from pytest_mooncake.targets.mooncake.placements.this_host import MooncakeTarget
from pytest_mooncake.targets.mooncake.store_clients import start_store_client
from pytest_mooncake.waits import wait_until

FLAGS_0_3_13 = dict.fromkeys(("enable_ha", "enable_oplog", "enable_snapshot",
                              "enable_snapshot_restore", "snapshot_interval_seconds",
                              "snapshot_object_store_type", "snapshot_backup_dir"))
"""Snapshot flags 0.3.13.post1's ``mooncake_master --help`` lists (MEASURED.md)."""
FLAGS_0_3_14 = dict.fromkeys(("enable_ha", "enable_oplog", "enable_oplog_snapshot",
                              "snapshot_interval_seconds", "snapshot_object_store_type",
                              "snapshot_chunk_object_count"))


def test_the_means_follows_the_probed_flags():
    assert isinstance(means_for(FLAGS_0_3_13), PeriodicSnapshots)
    assert isinstance(means_for(FLAGS_0_3_14), OplogSnapshots)
    assert lack(FLAGS_0_3_13, "b", "probe") is None
    no_store = {k: None for k in FLAGS_0_3_13 if k != "snapshot_object_store_type"}
    assert means_for(no_store) is None
    reason = lack(no_store, "mooncake 9.9", "mooncake_master --help (gflags)")
    assert reason is not None and "offers no means to have a snapshot written on request" in reason
    assert "--snapshot_object_store_type" in reason and "--enable_snapshot_restore" in reason
    assert "--enable_oplog_snapshot" in reason
    assert "probed from mooncake_master --help (gflags)" in reason
    assert "none" in lack({}, "b", "probe")


def test_periodic_snapshots_run_without_the_oplog_and_refuse_it():
    means = PeriodicSnapshots()
    assert means.settings()["snapshot_object_store_type"] == "local"
    assert means.settings()["snapshot_interval_seconds"] == master_snapshots.INTERVAL_SECONDS
    with pytest.raises(TargetLacks) as refused:
        master_snapshots.refuse_oplog(means, True, "mooncake 0.3.13")
    assert refused.value.capability is Capability.MASTER_SNAPSHOT
    assert "--enable_oplog=false" in refused.value.reason
    master_snapshots.refuse_oplog(means, None, "b")
    master_snapshots.refuse_oplog(OplogSnapshots(), True, "b")


class _LaggingOplog:
    """The masters of a cluster whose leader acknowledged writes up to OpLog sequence 40 while
    its durable prefix in etcd still stands at batch 26 (sequence 32), catching up after two
    reads: what 0.3.14 showed at -n 4 (a snapshot of 30 of 40 acknowledged objects). Stands in
    for the cluster in a unit test of ``OplogSnapshots.take`` alone."""

    build = "lagging-build"
    etcd = ["127.0.0.1:1"]
    oplog_cluster = cluster_id = "c"
    prefixes = [{"batch_id": 26, "last_seq": 32}, {"batch_id": 26, "last_seq": 32},
                {"batch_id": 29, "last_seq": 40}]

    def __init__(self):
        self.reads = list(self.prefixes)

    def leader(self):
        return 0

    def metrics(self, index):
        if index == 0:
            return {"ha_oplog_last_sequence_id": 40.0}
        return {"ha_snapshot_latest_batch": 29.0}

    def durable_prefix(self, etcd, cluster):
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]


def test_an_oplog_snapshot_waits_for_the_writes_acknowledged_before_the_request(
        monkeypatch, tmp_path):
    """The snapshot asked for must hold every write acknowledged before the request: the
    durable prefix is read until it reaches the leader's OpLog head, and only then is the
    batch to wait for chosen (29, not the lagging 26)."""
    from pytest_mooncake.targets.mooncake.master_cluster import admin_view
    masters = _LaggingOplog()
    monkeypatch.setattr(admin_view, "durable_prefix", masters.durable_prefix)
    report = OplogSnapshots().take(masters, 1, tmp_path)
    assert report["last_included_batch_id"] == 29, report
    assert "which reached the OpLog's head at the request, sequence 40" in report["oplog"]
    assert masters.reads == [{"batch_id": 29, "last_seq": 40}]


def test_the_wheel_has_a_snapshot_means_where_its_flags_are(mooncake_target):
    """Where the wheel's master lists a complete set of snapshot flags, master_snapshot is a
    capability (it was n/a for every build before the means were driven)."""
    flags = mooncake_target.placement.release_facts().master_flags
    if means_for(flags) is None:
        assert Capability.MASTER_SNAPSHOT not in mooncake_target.capabilities
        assert "probed from" in mooncake_target.lack_reason(Capability.MASTER_SNAPSHOT)
    else:
        assert Capability.MASTER_SNAPSHOT in mooncake_target.capabilities


OPLOG_RELEASE = "mooncake-cuda13==0.3.14"
"""The release with OpLog snapshots (its environment is cached by scripts/setup.sh)."""


@pytest.fixture(params=["wheel", OPLOG_RELEASE])
def snapshot_target(request, mooncake_target, mc_etcd, tmp_path):
    """The installed wheel (0.3.13.post1: periodic snapshots) and the 0.3.14 release (OpLog
    snapshots of a standby), each opened on ``mc_etcd``."""
    if request.param == "wheel":
        return mooncake_target
    try:
        target = MooncakeTarget.from_release(request.param)
    except UnknownTarget as exc:
        pytest.skip(f"n/a: {request.param} cannot be installed here: {exc}")
    target.open(TargetContext(seed=1, workdir=tmp_path / "target",
                              etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    request.addfinalizer(target.close)
    return target


def test_a_snapshot_written_and_restored_by_the_real_masters(snapshot_target, request):
    """The build's masters write a snapshot on request (seen on their metrics and files);
    every master is killed and a fresh one starts from the snapshot. 0.3.13.post1's periodic
    snapshot holds the objects, and a master started from it loads none (MP-9 FAILs on it);
    0.3.14's standby snapshot counts them in its manifest, and a fresh master bootstraps from
    it and serves them all."""
    missing = snapshot_target.missing(Capability.MASTER_SNAPSHOT)
    if missing:
        pytest.skip("n/a: " + missing)
    cluster = snapshot_target.master_cluster(masters=2, clients=1, snapshots=True)
    request.addfinalizer(cluster.close)
    leader = cluster.leader(timeout=30)
    (standby,) = cluster.standbys()
    keys = [f"snap-{i}" for i in range(12)]
    for key in keys:
        assert cluster.client().put(key, 64)["ok"]
    report = cluster.snapshot(standby)
    assert report["objects"] == len(keys), report
    assert report["snapshot_id"], report
    snapshots = cluster.workdir / "snapshots" / master_snapshots.SNAPSHOT_ROOT
    assert any(snapshots.rglob("*")), f"no snapshot file under {snapshots}"
    for index in (leader, standby):
        cluster.kill_master(index)
    fresh = cluster.start_master()
    assert cluster.leader(timeout=30) == fresh
    log = cluster.master_log(fresh)
    if isinstance(cluster.snapshot_means, PeriodicSnapshots):
        # 0.3.13.post1: the fresh master loads the newest snapshot as its baseline and says
        # keys=0, then restores 0 objects, though the snapshot held every key
        assert "Loaded snapshot baseline: snapshot_id=" in log
        assert "keys=0" in log and "Restored from standby: 0 objects" in log
        assert cluster.keys(fresh) == []
        return
    assert report["writer"] == standby, report
    # it bootstraps from that snapshot (nothing after it to replay) and lists every object once
    # the client remounted its segment (an object is listed when its segment is mounted again)
    assert (f"Batch snapshot bootstrap complete: snapshot_seq={report['last_included_seq']}"
            in log), report
    wait_until(lambda: sorted(cluster.keys(fresh)) == sorted(keys), 30,
               f"master {fresh} to list the {len(keys)} objects of the snapshot")


def test_a_master_without_ha_restarted_from_its_snapshot(mooncake_target, mc_etcd, tmp_path):
    """The build's periodic snapshot outside HA: one master writes snapshots of the objects a
    store client put, is SIGKILLed and restarted with --enable_snapshot_restore. Its restore
    names the snapshot it read, and what it then serves is one answer: the key count it
    reports, the keys it lists and what the client reads agree (0.3.13.post1: it logs a
    successful restore and serves none of the 12)."""
    launcher = mooncake_target.placement.launcher()
    flags = launcher.master_flags
    means = means_for(flags.flags)
    if not isinstance(means, PeriodicSnapshots):
        pytest.skip(f"n/a: {mooncake_target.version} has no periodic snapshots of one master "
                    f"({lack(flags.flags, mooncake_target.version, flags.source) or means.describe()})")
    rpc, admin = launcher.port(), launcher.port()
    argv, _ = flags.argv(launcher.master_binary(), {
        **launcher.master_rpc, "rpc_port": rpc, "metrics_host": "127.0.0.1",
        "metrics_port": admin, **means.settings()})
    url = f"http://127.0.0.1:{admin}"
    master = launcher.start(f"mooncake-master-alone-{rpc}", argv,
                            {master_snapshots.LOCAL_PATH_ENV: str(tmp_path / "snapshots")},
                            http_ok(url + "/health"), 30.0)
    client = start_store_client(launcher, tmp_path, list(mc_etcd.endpoints), "alone", 0, None,
                                30.0, master=f"127.0.0.1:{rpc}")
    try:
        keys = [f"alone-{i}" for i in range(12)]
        for key in keys:
            assert client.put(key, 64)["ok"]
        assert metrics(url)["master_key_count"] == len(keys)
        done = metrics(url).get("master_snapshot_success", 0) + 2
        wait_until(lambda: metrics(url).get("master_snapshot_success", 0) >= done, 60,
                   "two snapshots after the puts")
        master.kill()
        master.start()
        log = master.log_text().split("--- start #2")[-1]
        assert "[Restore] Successfully restored state from snapshot: " in log, log[-2000:]
        count = int(metrics(url)["master_key_count"])
        status, listed = admin_get(url + "/get_all_keys")
        def readable() -> list[str]:
            return [k for k in keys if client.get(k)["ok"]]

        # the client remounts its segment on its next heartbeat: what the master lists becomes
        # readable then (bounded); with nothing listed there is nothing to wait for
        read = wait_until(lambda: len(r := readable()) >= count and r, 30,
                          f"the {count} keys the restarted master lists to read") if count \
            else readable()
        assert status == 200 and len(listed.split()) == count == len(read), (count, listed, read)
        print(f"{mooncake_target.version}: restart from a snapshot of {len(keys)} objects "
              f"serves {count}, reads {len(read)}")
    finally:
        client.stop()
        master.terminate()
        launcher.release(rpc)
        launcher.release(admin)


def metrics(url: str) -> dict[str, float]:
    status, body = admin_get(url + "/metrics")
    assert status == 200, (status, body)
    return dict(parse_metrics(body))
