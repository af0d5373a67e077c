"""Multi-process HA on a real etcd: failover keeps the index (rfc, and legacy where 0.3.13 works),
a fresh standby is promotable only once caught up (rfc) and loses everything (legacy)."""

from __future__ import annotations

import time

import pytest

from pytest_mooncake.targets.reference.masters import put_keys
from pytest_mooncake.waits import TRANSIENT, wait_until


@pytest.mark.mc_req("MP-6")
@pytest.mark.parametrize("profile", ["rfc", "legacy"])
def test_soaked_standby_survives_leader_sigkill_with_every_key(cluster_factory, profile):
    cluster = cluster_factory(profile, masters=2, clients=1, warmup=0)
    client = cluster.client(0)
    keys = put_keys(client, 60)
    old = cluster.leader()
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == 60, 10, "standby applied every put", ignore=TRANSIENT)
    cluster.kill_master(old)
    new = cluster.leader(timeout=15)
    assert new == standby
    assert sorted(cluster.keys(new)) == sorted(keys)
    if profile == "rfc":
        wait_until(lambda: client.exists("k7").get("result", {}).get("exists"), 10,
                 "client reads on the new leader", ignore=TRANSIENT)


@pytest.mark.mc_req("MP-4", "MP-5", "MP-3")
def test_fresh_standby_not_promotable_until_caught_up_then_keeps_every_key(cluster_factory):
    cluster = cluster_factory("rfc", masters=1, clients=1,
                              master_args=["--replay-delay", "0.01"])
    keys = put_keys(cluster.client(0), 150)
    fresh = cluster.start_master()
    answers = []
    lags = []

    def caught_up():
        p = cluster.promotable(fresh)
        answers.append(p)
        lags.append(cluster.metrics(fresh)["ha_oplog_standby_lag"])
        return p["promotable"]

    wait_until(caught_up, 30, "fresh standby promotable", ignore=TRANSIENT)
    assert not answers[0]["promotable"], answers[0]
    assert answers[0]["keys_restorable"] < 150
    assert max(lags) > 0 and lags[-1] == 0
    for p in answers:
        if p["promotable"]:
            assert p["applied_seq"] == p["primary_seq"] and p["keys_restorable"] == 150, p
            assert p["validation"]["ok"] is True and p["validation"]["dropped_entries"] == 0
        else:
            assert p["reason"]
    cluster.kill_master(0)
    assert cluster.leader(timeout=15) == fresh
    assert sorted(cluster.keys(fresh)) == sorted(keys)


def test_legacy_fresh_standby_claims_promotable_at_once_and_promotes_into_an_empty_index(cluster_factory):
    cluster = cluster_factory("legacy", masters=1, clients=1, warmup=0)
    put_keys(cluster.client(0), 40)
    fresh = cluster.start_master()
    p = wait_until(lambda: (lambda a: a if a["promotable"] else None)(cluster.promotable(fresh)),
                 10, "legacy standby WATCHING", ignore=TRANSIENT)
    assert p["keys_restorable"] == 0 and p["primary_seq"] > 0
    assert cluster.metrics(fresh)["ha_oplog_standby_lag"] == 0
    cluster.kill_master(0)
    assert cluster.leader(timeout=15) == fresh
    assert cluster.key_count(fresh) == 0


@pytest.mark.mc_req("MP-7")
def test_clients_reattach_within_the_bound_after_failover(cluster_factory):
    cluster = cluster_factory("rfc", masters=2, clients=2, reattach_timeout=3.0)
    put_keys(cluster.client(0), 10)
    old = cluster.leader()
    cluster.kill_master(old)
    killed_at = time.time()
    new = cluster.leader(timeout=15)
    bound = cluster.lease_ttl + cluster.reattach_timeout + 2.0
    for c in cluster.clients:
        status = wait_until(lambda c=c: (lambda s: s if s["attached"] and s["reattaches"] else None)(c.status()),
                          bound, f"{c.client_id} reattached", ignore=TRANSIENT)
        assert status["leader"] == cluster.masters[new].address
        assert status["reattaches"][-1]["attached_at"] - killed_at < bound
    assert cluster.metrics(new)["master_active_clients"] == 2
    assert cluster.client(1).put("after-failover")["ok"]


def test_legacy_clients_stay_stuck_on_the_dead_connection(cluster_factory):
    cluster = cluster_factory("legacy", masters=2, clients=1, warmup=0, client_stall=60.0,
                              reattach_timeout=1.0)
    client = cluster.client(0)
    put_keys(client, 5)
    cluster.kill_master(cluster.leader())
    new = cluster.leader(timeout=15)
    bound = cluster.lease_ttl + 3.0 + 2.0
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        assert not client.status()["attached"]
        time.sleep(0.2)
    assert cluster.metrics(new)["master_active_clients"] == 0
    assert client.put("during-stall")["ok"] is False


@pytest.mark.parametrize(("profile", "options"), [
    ("legacy", {"client_stall": 1.0}),  # promotes into an empty index; its client stalls 1 s
    ("rfc", {"partial_restore": True}),  # drops the bad entry, keeps the rest
])
def test_a_new_leaders_first_key_list_is_still_its_list_after_the_writer_remounts(
        cluster_factory, profile, options):
    """``keys_final_when_serving``: the promotion suite takes a reference leader's first key
    list after a failover as its list (it waits for the writer's segment to be mounted again
    only on a build whose list grows then). A leader promoted with fewer objects than were
    written lists no more once the writer has mounted its segment on it again."""
    cluster = cluster_factory(profile, masters=2, clients=1, warmup=0, **options)
    assert cluster.keys_final_when_serving
    keys = put_keys(cluster.client(0), 12)
    old = cluster.leader()
    (standby,) = cluster.standbys()
    cluster.plant_bad_descriptor("k3")
    wait_until(lambda: cluster.key_count(standby) == 13, 10, "the standby applied the plant",
               ignore=TRANSIENT)
    cluster.kill_master(old)
    new = cluster.leader(timeout=15)
    first = sorted(cluster.keys(new))
    assert len(first) < len(keys) + 1, f"precondition: the promotion dropped objects: {first}"
    segment = cluster.client_segment(0)
    wait_until(lambda: cluster.segment_status(segment) is not None, 30,
               "the writer's segment mounted on the new leader", ignore=TRANSIENT)
    assert sorted(cluster.keys(new)) == first
