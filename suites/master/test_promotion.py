"""MP-1..MP-6, MP-9: promotion safety of HA masters (the master RFC's scenarios: a soaked standby
that survives a leader crash, a fresh standby with no baseline, a soaked standby with one bad
memory descriptor, snapshot restore)."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import Timeout, wait_until

WAIT = 20.0
KEYS = 40

pytestmark = pytest.mark.mc_requires("master_cluster")


def put_keys(client, n: int, prefix: str = "k") -> list[str]:
    keys = [f"{prefix}{i}" for i in range(n)]
    for key in keys:
        result = client.put(key, 64)
        assert result["ok"], f"precondition: put {key} failed on the healthy leader: {result}"
    return keys


def soaked(cluster, keys: int = KEYS) -> tuple[list[str], int, int]:
    """A leader and a standby that ran before the data was written and applied all of it."""
    written = put_keys(cluster.client(0), keys)
    leader = cluster.leader()
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == keys, WAIT,
               f"the standby to apply all {keys} puts")
    return written, leader, standby


def plant_bad_descriptor(cluster, standby: int) -> None:
    seq = cluster.plant_bad_descriptor("k3")
    wait_until(lambda: cluster.promotable(standby)["applied_seq"] >= seq, WAIT,
               "the standby to apply the planted entry")


@pytest.mark.mc_req("MP-6")
def test_soaked_standby_survives_leader_crash_with_every_object(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    keys, leader, standby = soaked(cluster)
    cluster.kill_master(leader)
    new = cluster.leader(timeout=WAIT)
    kept = sorted(cluster.keys(new))
    assert kept == sorted(keys), (
        f"a standby that ran before the data was written came up as leader with {len(kept)} of "
        f"{len(keys)} objects after the leader was killed; MP-6 requires every object survive")


@pytest.mark.mc_req("MP-1", "MP-5")
@pytest.mark.mc_requires("master_fault_planting")
def test_invalid_context_refuses_promotion_and_leader_stays(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    keys, leader, standby = soaked(cluster)
    plant_bad_descriptor(cluster, standby)
    answer = cluster.promotable(standby)
    lag = cluster.metrics(standby).get("ha_oplog_standby_lag")
    assert answer["promotable"] is False, (
        f"the standby's promotion context holds overlapping memory descriptors, yet it reports "
        f"promotable=true (lag {lag}, applied {answer.get('applied_seq')} of "
        f"{answer.get('primary_seq')}); MP-1 requires the dry-run validation to fail and MP-5 "
        f"that lag 0 alone never make a standby promotable")
    status, body = cluster.promote(standby)
    assert cluster.leader(timeout=WAIT) == leader, (
        f"a handover to a standby whose validation fails went ahead (HTTP {status}: {body}); "
        f"MP-1 requires the candidate refuse and the current leader stay in place")
    assert sorted(cluster.keys(leader)) == sorted(keys)
    assert cluster.client(0).put("after-refusal", 64)["ok"], "the leader stopped taking writes"


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
def test_partial_restore_keeps_every_valid_object(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1, partial_restore=True)
    keys, leader, standby = soaked(cluster)
    plant_bad_descriptor(cluster, standby)
    cluster.kill_master(leader)
    new = cluster.leader(timeout=WAIT)
    kept = set(cluster.keys(new))
    lost = sorted(set(keys) - kept)
    assert not lost, (
        f"one planted bad memory descriptor cost {len(lost)} of {len(keys)} valid objects after "
        f"failover (e.g. {lost[:5]}); MP-2 requires the restore drop only the invalid entry")


@pytest.mark.mc_req("MP-3", "MP-4", "MP-5")
def test_fresh_standby_is_not_promotable_until_caught_up(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=1)
    keys = put_keys(cluster.client(0), KEYS)
    fresh = cluster.start_master()
    answers = []

    def promotable():
        answer = cluster.promotable(fresh)
        answers.append(answer)
        return answer["promotable"]

    try:
        wait_until(promotable, WAIT, "the fresh standby to become promotable")
    except Timeout:
        pytest.fail(f"a fresh standby never became promotable after catching up; last answer: "
                    f"{answers[-1] if answers else None}", pytrace=False)
    for answer in answers:
        if answer["promotable"]:
            assert answer["keys_restorable"] == len(keys), (
                f"the fresh standby said promotable=true while it could restore only "
                f"{answer['keys_restorable']} of {len(keys)} keys (applied "
                f"{answer['applied_seq']} of {answer['primary_seq']}); MP-3 requires true to "
                f"mean 'promoted now, I come up with the index intact', MP-4 that a standby "
                f"with no baseline is not promotable until it has caught up")
            for field in ("reason", "validation", "applied_seq", "primary_seq"):
                assert field in answer, f"the promotability answer lacks {field!r} (MP-3)"
    cluster.kill_master(0)
    assert cluster.leader(timeout=WAIT) == fresh
    assert sorted(cluster.keys(fresh)) == sorted(keys)


@pytest.mark.mc_req("MP-9")
@pytest.mark.mc_requires("master_snapshot")
def test_snapshot_restore_keeps_the_objects_it_reports(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1, snapshots=True,
                                trim_oplog_after_snapshot=True)
    keys, leader, standby = soaked(cluster, 30)
    report = cluster.snapshot(standby)
    for index in (leader, standby):
        cluster.kill_master(index)
    fresh = cluster.start_master()
    new = cluster.leader(timeout=WAIT)
    assert new == fresh
    restored = sorted(cluster.keys(fresh))
    assert restored == sorted(keys), (
        f"the snapshot reported {report.get('objects')} objects; a master started from it came "
        f"up with {len(restored)} of {len(keys)}; MP-9 requires restore keep what it reports")
