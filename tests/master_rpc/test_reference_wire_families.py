"""A reference master's Mooncake-wire listener serves a client of every release family: each
family's arguments are read by their type hash and answered in that family's answer types
(the literals the releases' own masters send), and a version offered with ServiceReady is
judged by the reference master."""

from __future__ import annotations

import pytest

from pytest_mooncake.master_rpc.client import MasterRpcClient
from pytest_mooncake.master_rpc.layouts import LAYOUTS
from pytest_mooncake.master_rpc.probe import probe
from pytest_mooncake.targets.reference.coro_gateway import ANSWERS
from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster
from pytest_mooncake.targets.reference.wire_listeners import CoroListeners

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("master_rpc/test_reference_wire_families")


@pytest.fixture(scope="module")
def listener(mc_etcd, tmp_path_factory):
    cluster = ReferenceMasterCluster(mc_etcd.endpoints, tmp_path_factory.mktemp("ref"), "rfc", 1)
    try:
        yield cluster, cluster.wire_listener(cluster.leader(timeout=20))
    finally:
        cluster.close()


@pytest.mark.parametrize("family", [layout.name for layout in LAYOUTS])
def test_every_family_round_trips_in_its_own_answer_types(listener, family):
    _, address = listener
    layout = next(x for x in LAYOUTS if x.name == family)
    with MasterRpcClient(address, layout) as c:
        segment = {"id": (5, hash(family) & 0xFFFF), "name": f"seg-{family}",
                   "base": 1 << 32, "size": 16 << 20, "te_endpoint": f"127.0.0.1:1{family[-1]}777"}
        assert c.mount_segment(segment, (9, 9)).ok
        started = c.put_start((9, 9), f"k-{family}", 4096)
        assert started.ok and started.literal == ANSWERS[family]["PutStart"].literal()
        assert c.put_end((9, 9), f"k-{family}").ok
        got = c.get_replica_list(f"k-{family}")
        assert got.ok and got.literal == ANSWERS[family]["GetReplicaList"].literal()
        assert got.value["f0"][0]["f1"][1]["f0"]["f0"] == 4096
        assert c.exist_key(f"k-{family}").value is True
        assert c.remove(f"k-{family}", True).ok


def test_the_probe_finds_the_version_channel_and_a_refused_version_refuses_every_call(listener):
    cluster, address = listener
    found = probe(address, write=False)
    assert found.usable and found.takes_version, found.summary()
    assert isinstance(cluster, CoroListeners)
    refused = cluster.wire_client(version="7.0.0")
    assert refused.offered_version == "7.0.0"
    write, read = refused.put("k-refused", 64), refused.exists("k-refused")
    assert write["error"].endswith("INVALID_VERSION") and read["error"] == "INVALID_VERSION"
    assert "7.0.0" in cluster.master_log(cluster.leader())
    served = cluster.wire_client(version="1.9.0")
    assert served.put("k-served", 64)["ok"] and served.exists("k-served")["result"]["exists"]
