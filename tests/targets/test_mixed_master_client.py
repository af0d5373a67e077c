"""Mixed master/client pairs through the Target API: ``cluster.endpoint()`` and
``Target.store_client(endpoint)``, and the n/a every target gives where it has no means."""

from __future__ import annotations

import os

import pytest

from pytest_mooncake.targets import (
    Capability,
    MasterEndpoint,
    Target,
    TargetContext,
    TargetLacks,
    resolve_target,
)
from pytest_mooncake.targets.mooncake.store_clients import PROTOCOL as MOONCAKE_PROTOCOL
from pytest_mooncake.targets.mooncake.store_clients import payload
from pytest_mooncake.targets.reference.masters import PROTOCOL as REFERENCE_PROTOCOL

MOONCAKE_MASTERS = MasterEndpoint(MOONCAKE_PROTOCOL, ("127.0.0.1:1",), "c", "0.3.13.post1",
                                  "mooncake-transfer-engine-non-cuda 0.3.13.post1")
REFERENCE_MASTERS = MasterEndpoint(REFERENCE_PROTOCOL, ("127.0.0.1:1",), "c", "1.3.0",
                                   "reference-engine 0.1.0 (rfc)")


def opened(spec: str, mc_etcd, tmp_path) -> Target:
    target = resolve_target(spec)
    target.open(TargetContext(seed=1, workdir=tmp_path / spec.replace(":", "-"),
                              etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    (tmp_path / spec.replace(":", "-")).mkdir(exist_ok=True)
    return target


def test_protocol_names_agree_with_the_targets():
    assert resolve_target("reference").master_protocol == REFERENCE_PROTOCOL
    assert resolve_target("mooncake").master_protocol == MOONCAKE_PROTOCOL


def test_a_target_without_the_means_refuses_with_foreign_master():
    lacks = Target().store_client_lacks(REFERENCE_MASTERS)
    assert lacks is not None and lacks.capability is Capability.FOREIGN_MASTER
    with pytest.raises(TargetLacks) as refused:
        Target().store_client(REFERENCE_MASTERS)
    assert refused.value.capability is Capability.FOREIGN_MASTER


def test_reference_clients_speak_only_the_reference_protocol():
    ref = resolve_target("reference:legacy")
    assert ref.store_client_lacks(REFERENCE_MASTERS) is None
    assert ref.store_client_lacks(REFERENCE_MASTERS, version="0.9.0") is None
    lacks = ref.store_client_lacks(MOONCAKE_MASTERS)
    assert lacks.capability is Capability.FOREIGN_MASTER
    assert lacks.reason == (
        "store clients of reference-engine 0.1.0 (legacy) speak no master protocol but their "
        "own (reference-json-rpc); the masters of mooncake-transfer-engine-non-cuda "
        "0.3.13.post1 speak mooncake-coro-rpc")
    with pytest.raises(TargetLacks):
        ref.store_client(MOONCAKE_MASTERS)


def test_docker_and_cluster_targets_declare_no_mixed_clients(tmp_path):
    docker = resolve_target("docker:kvcacheai/mooncake:0.3.13")
    docker.client_factory = lambda timeout: (_ for _ in ()).throw(OSError("no engine"))
    for target in (docker, resolve_target("cluster:example")):
        for cap in (Capability.FOREIGN_MASTER, Capability.CLIENT_VERSION):
            assert target.missing(cap), (target.label, cap)
        assert target.store_client_lacks(MOONCAKE_MASTERS).capability is \
            Capability.FOREIGN_MASTER


def test_a_legacy_client_on_rfc_masters_announces_the_version_asked(mc_etcd, tmp_path):
    rfc, legacy = opened("reference", mc_etcd, tmp_path), opened("reference:legacy", mc_etcd,
                                                                 tmp_path)
    cluster = rfc.master_cluster(masters=1, clients=0)
    try:
        endpoint = cluster.endpoint()
        assert endpoint.protocol == REFERENCE_PROTOCOL and endpoint.version == "1.3.0"
        assert endpoint.etcd == tuple(mc_etcd.endpoints) and endpoint.cluster_id == \
            cluster.cluster_id
        same = legacy.store_client(endpoint, client_id="legacy-same")
        assert same.put("k", 64)["ok"] and same.exists("k")["result"]["exists"]
        other = legacy.store_client(endpoint, client_id="legacy-2x", version="2.0.0",
                                    wait_attached=False)
        refused = other.put("k2", 64)
        assert not refused["ok"] and "INVALID_VERSION" in refused["message"], refused
        assert "'2.0.0'" in cluster.master_log(cluster.leader())
        assert "--profile legacy" in " ".join(same.process.argv)
        other.stop()
        assert not other.alive()
    finally:
        legacy.close()
        cluster.close()
        rfc.close()
    assert not same.alive()


def test_mooncake_lacks_version_announcement_and_other_protocols(mooncake_target):
    assert "has no means to announce version" in mooncake_target.missing(
        Capability.CLIENT_VERSION)
    lacks = mooncake_target.store_client_lacks(REFERENCE_MASTERS)
    assert lacks.capability is Capability.FOREIGN_MASTER
    assert mooncake_target.version in lacks.reason and "reference-json-rpc" in lacks.reason
    inside = MasterEndpoint(MOONCAKE_PROTOCOL, ("etcd:2379",), "c", "", "kvcacheai/mooncake",
                            host_reachable=False)
    with pytest.raises(TargetLacks, match="only inside their container network"):
        mooncake_target.store_client(inside)
    with pytest.raises(TargetLacks) as versioned:
        mooncake_target.store_client(MOONCAKE_MASTERS, version="0.3.12")
    assert versioned.value.capability is Capability.CLIENT_VERSION


def test_a_mooncake_client_attaches_to_another_mooncake_targets_masters(mooncake_target,
                                                                        mc_etcd, tmp_path):
    if mooncake_target.missing(Capability.MASTER_CLUSTER):
        pytest.skip("n/a: " + mooncake_target.missing(Capability.MASTER_CLUSTER))
    assert mooncake_target.missing(Capability.FOREIGN_MASTER) is None
    other = opened("mooncake", mc_etcd, tmp_path)
    cluster = other.master_cluster(masters=1, clients=0)
    try:
        cluster.leader(timeout=30)
        endpoint = cluster.endpoint()
        assert endpoint.protocol == MOONCAKE_PROTOCOL and endpoint.host_reachable
        client = mooncake_target.store_client(endpoint)
        key = f"mixed-{os.getpid()}"
        assert client.put(key, 100)["ok"]
        got = client.get(key)
        assert got["ok"] and got["result"]["data"] == payload(key, 100)
        client.stop()
        assert not client.alive()
    finally:
        cluster.close()
        other.close()


def test_masters_answering_the_mooncake_wire_on_a_listener_take_mooncake_clients(
        mooncake_target):
    """A reference master cluster's endpoint lists its leader's Mooncake-wire listener; a
    Mooncake target's client attaches there, the reference's own clients still speak JSON."""
    assert resolve_target("reference").master_listener_protocols == (MOONCAKE_PROTOCOL,)
    listened = MasterEndpoint(REFERENCE_PROTOCOL, ("127.0.0.1:1",), "c", "1.3.0", "reference",
                              listeners=((MOONCAKE_PROTOCOL, "127.0.0.1:2"),))
    assert listened.address_for(MOONCAKE_PROTOCOL) == "127.0.0.1:2"
    assert mooncake_target.store_client_lacks(listened) is None
    assert resolve_target("reference").store_client_lacks(listened) is None
    assert mooncake_target.store_client_lacks(REFERENCE_MASTERS).capability is \
        Capability.FOREIGN_MASTER
