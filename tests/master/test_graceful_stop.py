"""The master-cluster handle's ``stop_master`` (SIGTERM) and ``start_master(index)``: a leader
stopped gracefully hands over and exits cleanly; started again at the same index it rejoins as
a standby, catches up, reports promotable and keeps every key (multi-process, real etcd)."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets.reference.masters import put_keys
from pytest_mooncake.waits import wait_until


@pytest.mark.mc_req("MP-6")
def test_sigterm_leader_hands_over_exits_cleanly_and_rejoins_at_the_same_index(cluster_factory):
    cluster = cluster_factory("rfc", masters=2, clients=1)
    client = cluster.client(0)
    keys = put_keys(client, 30, "before-")
    old = cluster.leader()
    (standby,) = cluster.standbys()
    wait_until(lambda: cluster.key_count(standby) == 30, 10, "the standby to apply every put")
    old_address, old_pid = cluster.masters[old].address, cluster.masters[old].process.pid

    cluster.stop_master(old)
    stopped = cluster.masters[old].process
    assert not cluster.alive(old)
    assert stopped.returncode == 0, (
        f"master {old} exited with {stopped.returncode} after SIGTERM (negative: killed by a "
        f"signal; -9: it did not shut down within the stop timeout and was SIGKILLed)")
    assert f"master {old_address} stopped" in cluster.master_log(old)

    assert cluster.leader(timeout=15) == standby
    new_address = cluster.masters[standby].address
    wait_until(lambda: (lambda s: s["attached"] and s["leader"] == new_address)(client.status()),
               15, f"the client to reattach to {new_address}")
    keys += put_keys(client, 30, "after-")

    assert cluster.start_master(old) == old
    assert cluster.masters[old].address == old_address, "restarted on other ports"
    assert cluster.masters[old].process.pid != old_pid
    assert cluster.health(old)["role"] == "standby"
    assert cluster.serving() == [standby], "the restarted master took leadership"
    answer = wait_until(lambda: (lambda p: p if p["promotable"] else None)(cluster.promotable(old)),
                        20, f"restarted master {old} to report promotable",
                        describe=lambda _: repr(cluster.promotable(old)))
    assert answer["applied_seq"] == answer["primary_seq"]
    assert answer["keys_restorable"] == 60, answer
    assert answer["validation"]["ok"] is True and answer["validation"]["dropped_entries"] == 0
    assert sorted(cluster.keys(old)) == sorted(keys)

    cluster.kill_master(standby)
    assert cluster.leader(timeout=15) == old
    assert sorted(cluster.keys(old)) == sorted(keys)
