"""MP-7, MP-8, MP-10: clients across a failover, version skew, segment drain lifecycle."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import Timeout, wait_until

REATTACH_BOUND = 15.0
WAIT = 20.0

pytestmark = pytest.mark.mc_requires("master_cluster")


@pytest.mark.mc_req("MP-7")
def test_clients_reattach_to_the_new_leader_within_a_bound(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    client = cluster.client(0)
    assert client.put("before-failover", 64)["ok"]
    cluster.kill_master(cluster.leader())
    cluster.leader(timeout=WAIT)
    try:
        wait_until(lambda: client.put("after-failover", 64)["ok"], REATTACH_BOUND,
                   "the client's writes to succeed on the new leader")
    except Timeout:
        pytest.fail(f"{REATTACH_BOUND:g}s after the leader was killed and a new one served, the "
                    f"client still could not write; MP-7 requires clients reattach to the new "
                    f"leader within a bounded time, never blocked on the dead leader",
                    pytrace=False)


@pytest.mark.mc_req("MP-8")
def test_incompatible_client_is_rejected_loudly_for_reads_and_writes(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=1)
    assert cluster.client(0).put("k", 64)["ok"]
    old = cluster.start_client("skewed-client", version="0.1.0", wait_attached=False)
    wait_until(lambda: old.put("k2", 64)["ok"] is False, WAIT, "the skewed client's write to fail")
    put, read = old.put("k3", 64), old.exists("k")
    assert put["ok"] is False and read["ok"] is False, (
        f"a client announcing version 0.1.0 got read ok={read['ok']} and write ok={put['ok']}; "
        f"MP-8 requires reads and writes behave alike, so a partial rollout cannot look healthy "
        f"while writes fail")
    log = cluster.master_log(cluster.leader())
    assert "0.1.0" in log, (
        "the master rejected a client of version 0.1.0 without a log line naming that version; "
        "MP-8 requires version skew be loud master-side")


@pytest.mark.mc_req("MP-8")
def test_compatible_skew_is_accepted(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=0)
    newer = cluster.start_client("newer-client", version="1.9.0")
    assert newer.put("k", 64)["ok"] and newer.exists("k")["ok"], (
        "a client announcing a compatible newer minor version was refused (MP-8 accepts "
        "compatible skew)")
