"""A failed handshake re-creates the endpoint's QPs; when the device died meanwhile (its fatal
event not read yet), that must fail the endpoint, not the worker thread that connects.

Found by the free-running soak (seed 201423549): ``VerbsError: n0: device unusable`` escaped
``connect_active`` and killed worker ``A@n0.w1``, leaving three transfers that never ended.
"""

import pytest

from reference_engine.rdma.endpoint import CONNECT_FAILED, DESTROYED, UNCONNECTED
from reference_engine.rdma.sim.sim_cluster import SimCluster


@pytest.fixture
def cluster():
    c = SimCluster("rfc", controlled=True, slice_size=4096)
    c.add_node("A")
    c.add_node("B")
    yield c
    c.close()


def _endpoint(cluster):
    a = cluster.peers["A"].transport
    b = cluster.peers["B"].transport
    ctx = a.contexts[0]
    ep = ctx.endpoint(b.contexts[0].nic_path)
    assert ep is not None and ep.state == UNCONNECTED and ep.qps
    return ctx, ep


def _refused(server, request):
    raise ConnectionRefusedError(f"no handshake listener for {server!r}")


def test_a_handshake_failing_after_the_device_died_fails_the_endpoint_not_the_caller(cluster):
    ctx, ep = _endpoint(cluster)
    slot = ep.slot
    cluster.fabric.raise_device_fatal(ctx.verbs)

    assert ep.connect_active(_refused) == CONNECT_FAILED
    assert ep.qps == [] and not ep.postable and ep.state == UNCONNECTED
    assert "ConnectionRefusedError" in ep.last_error
    assert "re-creating its QPs failed" in ep.last_error
    assert "device unusable" in ep.last_error

    calls = []
    assert ep.connect_active(lambda s, r: calls.append(s) or {}) == CONNECT_FAILED
    assert calls == [], "an endpoint without QPs handshook again"

    ep.destroy_qps()
    assert ep.state == DESTROYED
    assert ctx.slots[slot] is None and slot in ctx.free_slots, "its slot was never freed"


def test_a_handshake_failing_on_a_live_device_gets_fresh_qps(cluster):
    ctx, ep = _endpoint(cluster)
    old = list(ep.qp_nums)

    assert ep.connect_active(_refused) == CONNECT_FAILED
    assert ep.state == UNCONNECTED and ep.postable
    assert len(ep.qps) == len(old) and not set(ep.qp_nums) & set(old)
    assert all(ctx.qp_owner[n] is ep for n in ep.qp_nums)
    assert "re-creating" not in ep.last_error
