"""MR-16's shape across the lab, on the reference engine: an engine on n1 writes into one on n2
over the lab's addresses; n2's engine is killed with SIGKILL over SSH and started again (a new
instance under the same segment name), and n1's transfers recover into the new instance."""

from __future__ import annotations


def test_transfers_recover_after_a_peer_is_killed_and_restarted_over_ssh(mc_lab_fleet, engines):
    a, b = engines["n1"], engines["n2"]
    old = b.call("info")
    assert a.write("seg-b", 0, b"before-kill")["ok"] is True
    assert b.local_read(0, 11) == b"before-kill"
    replacements = a.call("stats")["replacements"]

    node = mc_lab_fleet.node_of("engine-seg-b")
    assert node.kill("engine-seg-b") == [old["pid"]]
    dead = a.write("seg-b", 0, b"while-dead")
    assert dead["ok"] is False and "198.18." in dead["error"]  # it tried the lab address

    node.start("engine-seg-b")
    new = b.call("info")
    assert new["instance_id"] != old["instance_id"] and new["pid"] != old["pid"]
    got = a.write("seg-b", 64, b"after-restart")
    assert got["ok"] is True, got
    assert b.local_read(64, 13) == b"after-restart"
    stats = a.call("stats")
    assert stats["replacements"] == replacements + 1  # it noticed the new instance
    assert stats["peer_connections_stale"] == 0        # and kept no socket to the dead one
