"""Deployment profiles on a real release: ``@defaults`` starts 0.3.13.post1's masters without
``--enable_oplog`` (the build's default) and records that it did; ``@ha-oplog`` (the default)
passes ``--enable_oplog=true``; ``@ha-snapshot`` turns the OpLog off and periodic snapshots on."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets import TargetContext, resolve_target
from pytest_mooncake.targets.base import TargetLacks

pytestmark = pytest.mark.xdist_group("releases")

RELEASE = "0.3.13.post1"


@pytest.fixture
def deployed(real_release, mc_etcd, tmp_path):
    """``deployed("defaults")``: 0.3.13.post1 as that profile, opened on ``mc_etcd``."""
    targets = []

    def open_profile(profile: str):
        real_release(RELEASE)
        target = resolve_target(f"mooncake=={RELEASE}@{profile}")
        target.open(TargetContext(seed=1, workdir=tmp_path / profile,
                                  etcd_endpoints=lambda: list(mc_etcd.endpoints)))
        targets.append(target)
        return target

    yield open_profile
    for target in targets:
        target.close()


def _argv(cluster) -> list[str]:
    return list(cluster.masters[0].process.argv)


@pytest.mark.release
def test_defaults_passes_no_enable_oplog_and_records_it(deployed):
    target = deployed("defaults")
    assert target.label == f"mooncake-non-cuda=={RELEASE}@defaults"
    cluster = target.master_cluster(masters=2, clients=1)
    try:
        argv = _argv(cluster)
        assert not any(a.startswith("--enable_oplog") for a in argv), argv
        assert "--enable_ha=true" in argv and not any("snapshot" in a for a in argv), argv
        leader = cluster.leader(timeout=30)
        assert cluster.client(0).put("k", 64)["ok"] and cluster.key_count(leader) == 1
        assert "falls back to noop" in cluster.master_log(cluster.standbys()[0]) or \
            "noop" in cluster.master_log(cluster.standbys()[0]).lower(), (
            "a standby without --enable_oplog should say it follows nothing")
    finally:
        cluster.close()
    record = target.deployment()
    assert record["build"] == f"mooncake-non-cuda=={RELEASE}"
    assert record["profile"]["name"] == "defaults"
    assert record["profile"]["master_flags"] == []
    assert not any("enable_oplog" in f for f in record["masters"]["flags"])
    assert "--enable_ha=true" in record["masters"]["flags"]
    assert sorted(record["engines"]["cache_env_read"]) == [
        "MC_DISABLE_METACACHE", "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS"]


@pytest.mark.release
def test_ha_oplog_and_ha_snapshot_pass_their_flags(deployed):
    oplog = deployed("ha-oplog")
    assert oplog.label == f"mooncake-non-cuda=={RELEASE}"
    cluster = oplog.master_cluster(masters=1, clients=0)
    try:
        assert "--enable_oplog=true" in _argv(cluster)
    finally:
        cluster.close()
    assert "--enable_oplog=true" in oplog.deployment()["masters"]["flags"]
    snapshot = deployed("ha-snapshot")
    cluster = snapshot.master_cluster(masters=1, clients=0)
    try:
        argv = _argv(cluster)
        assert {"--enable_oplog=false", "--enable_snapshot=true",
                "--enable_snapshot_restore=true"} <= set(argv), argv
        assert cluster.masters[0].process.env.get("MOONCAKE_SNAPSHOT_LOCAL_PATH", "").endswith(
            "snapshots")
    finally:
        cluster.close()


@pytest.mark.release
def test_ha_oplog_short_lease_runs_0_3_14_on_a_two_second_lease(real_release, mc_etcd, tmp_path):
    """0.3.14 accepts ``--ha_leader_lease_ttl_sec=2``, echoes it, and still fails over; a build
    without the flag is refused naming it before any master starts."""
    real_release("0.3.14")
    target = resolve_target("mooncake-cuda13==0.3.14@ha-oplog-short-lease")
    target.open(TargetContext(seed=1, workdir=tmp_path / "short",
                              etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    try:
        assert target.label == "mooncake-cuda13==0.3.14@ha-oplog-short-lease"
        cluster = target.master_cluster(masters=2, clients=1)
        try:
            assert {"--enable_oplog=true", "--ha_leader_lease_ttl_sec=2"} <= set(_argv(cluster))
            leader = cluster.leader(timeout=30)
            assert "ha_leader_lease_ttl_sec=2" in cluster.master_log(leader).replace(" ", "")
            assert cluster.client(0).put("k", 64)["ok"]
            cluster.kill_master(leader)
            assert cluster.leader(timeout=30) != leader
        finally:
            cluster.close()
        assert "--ha_leader_lease_ttl_sec=2" in target.deployment()["masters"]["flags"]
    finally:
        target.close()
    real_release(RELEASE)
    older = resolve_target(f"mooncake=={RELEASE}@ha-oplog-short-lease")
    older.open(TargetContext(seed=1, workdir=tmp_path / "older",
                             etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    try:
        with pytest.raises(TargetLacks, match="no master flag --ha_leader_lease_ttl_sec"):
            older.master_cluster(masters=1, clients=0)
    finally:
        older.close()
