"""Per-master etcd routing (``master_etcd={i: address}``, ``start_master(etcd=address)``) is a
reference-target option: the mooncake, docker and cluster targets refuse it with ``TargetLacks``
naming the option, before starting anything, instead of running every master on the cluster's
etcd as if the test's fault proxy were in the path."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets import resolve_target
from pytest_mooncake.targets.base import Capability, TargetContext, TargetLacks
from pytest_mooncake.targets.mooncake.master_cluster.ha_processes import MooncakeMasterCluster
from pytest_mooncake.targets.mooncake.placements.containers import DockerTarget

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


def test_mooncake_target_refuses_master_etcd_without_etcd_or_processes(tmp_path):
    target = resolve_target("mooncake")
    reason = target.missing(Capability.MASTER_CLUSTER)
    if reason:
        pytest.skip(f"n/a: {reason}")
    asked: list[str] = []
    target.open(TargetContext(seed=1, workdir=tmp_path,
                              etcd_endpoints=lambda: asked.append("etcd") or ["127.0.0.1:2379"]))
    try:
        with pytest.raises(TargetLacks) as lacks:
            target.master_cluster(masters=2, clients=1, master_etcd={0: PROXY})
        refused(lacks, "master_etcd")
        assert asked == [] and target.supervisor.processes == []
    finally:
        target.close()


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
