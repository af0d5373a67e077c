"""Per-master etcd routing (``master_etcd={i: address}``, ``start_master(etcd=address)``): the
reference target and the local mooncake target (its masters run on this host) route; the docker
and cluster targets, and a placement that names no routing, refuse it with ``TargetLacks``
naming the option, before starting anything, instead of running every master on the cluster's
etcd as if the test's fault proxy were in the path."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets import resolve_target
from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.ha_processes import (
    MooncakeMasterCluster,
    _Master,
)
from pytest_mooncake.targets.mooncake.option_rules import check_master_options
from pytest_mooncake.targets.mooncake.placements.containers import DockerTarget
from pytest_mooncake.targets.mooncake.placements.this_host import LocalPlacement

PROXY = "127.0.0.1:1"


class RecordingPlacement:
    """A placement that records every use; nothing may be asked of it before the refusal."""

    version = "stub"
    bind_host = "127.0.0.1"
    master_rpc: dict[str, str] = {}

    def __init__(self):
        self.calls: list[str] = []

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append(name)
            raise AssertionError(f"placement.{name} used before the refusal")
        return record


def refused(excinfo, option: str) -> None:
    assert excinfo.value.capability is Capability.MASTER_CLUSTER
    assert excinfo.value.reason.startswith(f"{option}: no per-master etcd routing"), excinfo.value


def test_mooncake_master_cluster_refuses_master_etcd_before_starting_anything(tmp_path):
    placement = RecordingPlacement()
    with pytest.raises(TargetLacks) as lacks:
        MooncakeMasterCluster(placement, tmp_path / "a", ["127.0.0.1:2379"], masters=2,
                              clients=1, master_etcd={0: PROXY})
    refused(lacks, "master_etcd")
    assert placement.calls == []

    cluster = MooncakeMasterCluster(placement, tmp_path / "b", ["127.0.0.1:2379"], masters=0,
                                    clients=0, master_etcd={})
    with pytest.raises(TargetLacks) as lacks:
        cluster.start_master(etcd=PROXY)
    refused(lacks, "start_master(etcd=...)")
    assert placement.calls == [] and cluster.masters == []


class StubLauncher:
    """Ports and names a master's flags need; nothing is ever started."""

    version = "stub"
    bind_host = "127.0.0.1"
    master_rpc: dict[str, str] = {}
    master_flags = MasterFlags(dict.fromkeys(("enable_ha", "etcd_endpoints", "cluster_id",
                                              "rpc_port", "metrics_port", "enable_oplog"), ""),
                               "stub", "mooncake_master --help")

    def __init__(self):
        self.next_port = 30000

    def port(self) -> int:
        self.next_port += 1
        return self.next_port


def test_the_local_mooncake_target_gives_a_master_its_own_etcd_endpoints(tmp_path):
    """This host's masters reach what the test reaches (a fault proxy in front of the run's
    etcd), so the local placement routes: the master started with ``etcd`` is told those
    endpoints, every other master the cluster's; a restart keeps what it was started with."""
    assert LocalPlacement.etcd_routing == ""
    assert check_master_options({"master_etcd": {0: PROXY}}, "stub", no_routing="") == {
        "master_etcd": {0: PROXY}}
    cluster = MooncakeMasterCluster(StubLauncher(), tmp_path / "a", ["127.0.0.1:2379"],
                                    masters=0, clients=0, etcd_routing="")
    routed = _Master(0, 30001, 30002, etcd=[PROXY])
    plain = _Master(1, 30003, 30004)
    assert cluster._settings(routed)["etcd_endpoints"] == PROXY
    assert cluster._settings(plain)["etcd_endpoints"] == "127.0.0.1:2379"
    cluster.masters.append(plain)
    with pytest.raises(TargetLacks) as lacks:
        cluster.start_master(0, etcd=PROXY)
    refused(lacks, "start_master(0, etcd=...)")
    assert "keeps the command line" in lacks.value.reason


def test_docker_target_refuses_master_etcd_before_touching_docker():
    def no_docker(timeout):
        raise AssertionError("the Docker engine was asked for")

    target = DockerTarget("kvcacheai/mooncake:0.3.13", client_factory=no_docker)
    with pytest.raises(TargetLacks) as lacks:
        target.master_cluster(masters=2, clients=0, master_etcd={1: PROXY})
    refused(lacks, "master_etcd")


def test_cluster_target_refuses_master_etcd(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[masters]]\nadmin = "http://127.0.0.1:1"\n[faults]\nallow = ["observe"]\n')
    target = resolve_target(f"cluster:{path}")
    with pytest.raises(TargetLacks) as lacks:
        target.master_cluster(masters=1, clients=0, master_etcd={0: PROXY})
    refused(lacks, "master_etcd")
    assert "never chooses their etcd" in lacks.value.reason
    with pytest.raises(TargetLacks, match="starts its masters with their own command lines"):
        target.master_cluster(masters=1, clients=0).start_master(etcd=PROXY)
