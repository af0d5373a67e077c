"""A release's own mooncake.store client puts and gets through a reference master, reached
through the coro_rpc gateway (the reference speaks its JSON protocol behind it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_mooncake.targets.reference.coro_gateway import CoroGateway
from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster

SCRIPT = Path(__file__).with_name("real_store_client.py")


@pytest.fixture
def reference_leader(mc_etcd, tmp_path):
    cluster = ReferenceMasterCluster(mc_etcd.endpoints, tmp_path / "ref", "rfc", 1, 0)
    try:
        yield cluster.masters[cluster.leader(timeout=20)].address
    finally:
        cluster.close()


@pytest.mark.parametrize("release", ["0.3.10.post2", "0.3.11.post1", "0.3.12.post1",
                                     "0.3.13.post1", "0.3.14"])
def test_a_release_client_puts_and_gets_through_a_reference_master(release_env,
                                                                   reference_leader, release):
    env = release_env(release)
    with CoroGateway(reference_leader) as gateway:
        run = subprocess.run([str(env.python), str(SCRIPT), gateway.address], env=env.env(),
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "put 0" in run.stdout and "get 64 same" in run.stdout, (
        f"{release}'s client through the gateway (calls {gateway.calls}): {run.stdout}"
        f"{run.stderr[-3000:]}")
    assert "exists 1" in run.stdout, run.stdout
    assert {"ServiceReady", "MountSegment", "PutStart", "PutEnd", "GetReplicaList",
            "ExistKey", "Remove"} <= set(gateway.calls), gateway.calls
