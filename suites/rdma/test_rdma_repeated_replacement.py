"""MR-9 across successive replacements: the peer is replaced again and again under the same
segment name, and every time the endpoints of the instance just replaced are retired - not
only those of the first one a consumer met (state recorded once per name instead of once per
instance would retire nothing from the second replacement on)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mc_requires("rdma_control", "rdma_state")
ROUNDS = 3


def endpoints_to(cluster, node: str, peer: str) -> set[tuple[str, int]]:
    """(peer NIC path, generation) of each active endpoint of ``node`` to ``peer``."""
    return {(e["peer_nic_path"], e["generation"]) for e in cluster.endpoints(node)
            if e["peer_nic_path"].startswith(f"{peer}@")}


@pytest.mark.mc_req("MR-9")
def test_every_replacement_retires_the_replaced_instances_endpoints(mc_completions):
    cluster = mc_completions.cluster(checked=True)
    cluster.add_node("A", ["mlx5_0", "mlx5_1"])
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    t = cluster.submit("A", "B", 8192)
    assert cluster.settle() and cluster.status(t) == "COMPLETED", (
        f"the first transfer to B ended {cluster.status(t)}")
    for n in range(1, ROUNDS + 1):
        held = endpoints_to(cluster, "A", "B")
        assert held, f"precondition: A holds endpoints to B's instance {n} ({cluster.endpoints('A')})"
        old = cluster.descriptor("B")["instance_id"]
        cluster.restart_peer("B")
        new = cluster.descriptor("B")["instance_id"]
        assert cluster.refresh("A", "B"), f"A's forced refresh of B's instance {n + 1} failed"
        cluster.settle()
        retired = {(r["peer_nic_path"], r["generation"]) for r in cluster.retired("A")}
        kept = sorted(held - retired)
        assert not kept, (
            f"replacement {n} of B (instance {(old or 'none')[:8]}.. -> {(new or 'none')[:8]}..): "
            f"A saw the new instance "
            f"yet never retired {len(kept)} endpoint(s) it had to the replaced one: {kept}"
            + (" (the first replacement retired them all)" if n > 1 else "")
            + ". MR-9 requires every endpoint of the old instance be retired on every "
              "instance_id change")
        t = cluster.submit("A", "B", 8192)
        assert cluster.settle() and cluster.status(t) == "COMPLETED", (
            f"the transfer to B's instance {n + 1} ended {cluster.status(t)}")
    assert not cluster.check()
