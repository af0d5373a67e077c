"""MR-9..MR-13 on the RDMA path: a peer replaced under the same segment name, NIC names,
addresses and rkeys; the same instance republishing; recovery from transport failures; no
deadlock between lookup, refresh and replacement."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mc_requires("rdma_control")


def cluster_with_traffic(mc_completions, controlled: bool = True):
    cluster = mc_completions.cluster(controlled=controlled)
    cluster.add_node("A")
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    return cluster


@pytest.mark.mc_req("MR-9", "MR-11")
def test_replaced_peer_old_endpoints_retired_transfer_completes_on_new(mc_completions):
    cluster = cluster_with_traffic(mc_completions)
    old = [e for e in cluster.endpoints("A") if e["peer_nic_path"].startswith("B@")]
    cluster.restart_peer("B")
    cluster.write_local("A", 0, b"to-the-new-B!!!!" * 256)
    cluster.refresh("A", "B")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle()
    retired = {(r["peer_nic_path"], r["generation"]) for r in cluster.retired("A")}
    leftover = [e for e in old if (e["peer_nic_path"], e["generation"]) not in retired]
    assert not leftover, (
        f"B restarted as a new instance with the same NIC names, addresses and rkeys; A kept "
        f"{len(leftover)} endpoint(s) of the old instance ({leftover}); MR-9 requires every "
        f"endpoint of the old instance be retired, MR-11 that the replacement be detected even "
        f"when those fields are reused")
    assert cluster.status(t) == "COMPLETED", f"the transfer to the new B ended {cluster.status(t)}"
    assert cluster.read("B", 0, 4096) == b"to-the-new-B!!!!" * 256, "the data did not reach the new B"
    assert not cluster.check()


@pytest.mark.mc_req("MR-10")
def test_same_instance_retires_nothing(mc_completions):
    cluster = cluster_with_traffic(mc_completions)
    before = cluster.retired("A")
    cluster.restart_peer("B", same_instance=True)
    cluster.refresh("A", "B")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle() and cluster.status(t) == "COMPLETED"
    cleanup = [r for r in cluster.retired("A")[len(before):] if r["cause"] == "replacement"]
    assert not cleanup, (
        f"B came back under the same instance_id and A ran replacement cleanup on {cleanup}; "
        f"MR-10 forbids replacement cleanup for the same instance_id (endpoints that fail may "
        f"still be retired as transport failures)")


@pytest.mark.mc_req("MR-12")
def test_transport_failure_recovers_on_the_replaced_peer(mc_completions):
    cluster = cluster_with_traffic(mc_completions)
    cluster.restart_peer("B")
    t = cluster.submit("A", "B", 4096)
    assert cluster.settle()
    assert cluster.status(t) == "COMPLETED", (
        f"B was replaced without A noticing; A's next transfer ended {cluster.status(t)} instead "
        f"of recovering through retire, forced refresh and a bounded retry (MR-12)")
    slices = cluster.slices(t)
    assert all(s["successes"] == 1 and s["failures"] == 0 for s in slices)
    assert not cluster.check()


@pytest.mark.mc_req("MR-13")
def test_no_deadlock_between_transfers_refresh_and_replacement(mc_completions):
    cluster = mc_completions.cluster(controlled=False)
    cluster.add_node("A", ["n0", "n1"])
    cluster.add_node("B", ["n0", "n1"])
    transfers = []
    for _ in range(4):
        transfers += [cluster.submit("A", "B", 8 * 4096, src_offset=i * 65536,
                                     dst_offset=i * 65536) for i in range(4)]
        cluster.restart_peer("B")
        cluster.refresh("A", "B")
    assert cluster.settle(timeout=60), (
        "free-running workers did not finish their transfers while the peer was replaced and "
        "refreshed concurrently: a deadlock or a lost wake-up (MR-13)")
    assert not [v for v in cluster.check() if v.kind in ("no_quiescence", "stuck_slice")]
