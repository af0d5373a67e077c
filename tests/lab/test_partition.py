"""Partitions with the nodes' own tools really block traffic between lab nodes, and heal
restores it; each is in the ledger before it is applied."""

from __future__ import annotations

import pytest

from pytest_mooncake.lab.network import connect_from
from pytest_mooncake.waits import wait_until


def reach(lab, src: str, dst: str, port: int = 22, timeout: float = 1.0) -> str:
    """A TCP connection from node ``src`` to node ``dst``: ``connected`` or the errno name.
    A dropped SYN shows as ETIMEDOUT after ``timeout``; a working path connects at once."""
    return connect_from(lab.layout.node(int(src[1:])).netns,
                        lab.layout.node(int(dst[1:])).address, port, timeout=timeout)


@pytest.mark.parametrize("tool", ["nft", "iptables"])
def test_partition_blocks_both_ways_and_heal_restores(mc_lab, mc_lab_fleet, tool):
    faults = mc_lab_fleet.faults
    assert reach(mc_lab, "n2", "n3") == "connected"
    cut = faults.partition("n2", ["n3"], tool=tool)
    entry = next(e for e in mc_lab_fleet.ledger.entries() if e.id == cut.id)
    assert entry.history == ["applying", "applied"] and entry.fault["tool"] == tool
    assert faults.in_place("n2") == [f"nft mcchaos_{cut.id}" if tool == "nft" else
                                     f"iptables MCC-{cut.id}-{side}" for side in ("I", "O")
                                     ][: 1 if tool == "nft" else 2]
    # packets are dropped (a partition, not a refusal): connections time out both ways
    assert reach(mc_lab, "n2", "n3") == "ETIMEDOUT"
    assert reach(mc_lab, "n3", "n2") == "ETIMEDOUT"
    assert reach(mc_lab, "n2", "n1") == "connected"  # only the named peer is cut
    cut.heal()
    assert faults.in_place("n2") == []
    assert reach(mc_lab, "n2", "n3") == "connected"
    assert reach(mc_lab, "n3", "n2") == "connected"
    assert mc_lab_fleet.ledger.outstanding(mc_lab_fleet.run) == []


def test_partition_from_etcd_cuts_only_the_client_port(mc_lab, mc_lab_fleet, engines):
    cut = mc_lab_fleet.faults.isolate_from_etcd("n3")
    assert cut.detail["peers"] == [f"{mc_lab.layout.node(1).address}:2379"]
    assert reach(mc_lab, "n3", "n1", 2379) == "ETIMEDOUT"
    assert reach(mc_lab, "n3", "n1", 22) == "connected"
    # the engine on n3 can no longer look a peer up in etcd
    looked = engines["n3"].call("lookup", peer="seg-b", force=True)
    assert looked["ok"] is False
    cut.heal()
    assert engines["n3"].call("lookup", peer="seg-b", force=True)["ok"] is True


def test_isolate_by_link_cuts_the_node_off_and_heal_brings_it_back(mc_lab, mc_lab_fleet):
    cut = mc_lab_fleet.faults.isolate("n3", tool="link")
    assert cut.kind == "link" and cut.detail["link"] == mc_lab.layout.node(3).link
    assert reach(mc_lab, "n1", "n3") == "ETIMEDOUT"
    cut.heal()
    # the link is up again at once, but n1's neighbour entry for n3 failed while it was down:
    # the first SYNs may wait on ARP, so connect until it works (bounded), not once
    wait_until(lambda: reach(mc_lab, "n1", "n3") == "connected", 30, "n1 to reach n3 again")


def test_partition_refuses_to_cut_our_own_ssh_session(mc_lab, mc_lab_fleet):
    with pytest.raises(ValueError, match="would cut our own SSH session"):
        mc_lab_fleet.faults.partition("n2", [mc_lab.layout.host_address])
    assert mc_lab_fleet.ledger.outstanding(mc_lab_fleet.run) == []
