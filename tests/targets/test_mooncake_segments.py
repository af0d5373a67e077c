"""Segments of a real ``mooncake_master`` through its admin service: names, replicas, drain
jobs and status (what MP-10 reads), and how the handle treats ``client_ttl``."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets.base import Capability, TargetError
from pytest_mooncake.targets.mooncake.option_rules import whole_seconds
from pytest_mooncake.waits import wait_until

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_mooncake_segments")


@pytest.fixture(scope="module")
def cluster(mooncake_target):
    if mooncake_target.missing(Capability.MASTER_CLUSTER):
        pytest.skip("n/a: " + mooncake_target.missing(Capability.MASTER_CLUSTER))
    c = mooncake_target.master_cluster(masters=1, clients=2, client_ttl=1.5)
    yield c
    c.close()


def test_fractional_client_ttl_is_rounded_up_and_checked_against_the_master(cluster):
    assert "--client_ttl=2" in cluster._argv(cluster.masters[0])
    assert "client_ttl=2" in cluster.master_log(0)
    for bad in (0, -1, "2", True):
        with pytest.raises(ValueError, match="client_ttl must be a positive number"):
            whole_seconds(bad, "client_ttl")


def test_segments_are_named_by_the_master_and_replicas_map_onto_them(cluster):
    names = [cluster.client_segment(i) for i in range(2)]
    assert len(set(names)) == 2
    assert {s["segment_name"] for s in cluster.segments_detail()} == set(names)
    assert all(cluster.segment_status(n) == "OK" for n in names)
    assert cluster.segment_status("127.0.0.1:1") is None
    keys = [f"seg-{i}" for i in range(8)]
    for key in keys:
        assert cluster.client(0).put(key, 64)["ok"]
    placed = {key: cluster.replica_segments(key) for key in keys}
    assert all(len(p) == 1 and p[0] in names for p in placed.values()), placed
    assert cluster.replica_segments("absent-key") == []


def test_drain_moves_objects_off_and_refusals_carry_the_masters_error(cluster):
    with pytest.raises(TargetError, match="SEGMENT_NOT_FOUND"):
        cluster.drain_segment("127.0.0.1:1")
    source, other = cluster.client_segment(0), cluster.client_segment(1)
    keys = [f"drain-{i}" for i in range(8)]
    for key in keys:
        assert cluster.client(1).put(key, 64)["ok"]
    on_source = [k for k in keys if source in cluster.replica_segments(k)]
    assert on_source, "precondition: some object on the source segment"
    cluster.drain_segment(source)
    assert cluster.segment_status(source) in ("DRAINING", "DRAINED")
    wait_until(lambda: cluster.segment_status(source) == "DRAINED", 30, "DRAINED")
    assert all(cluster.replica_segments(k) == [other] for k in on_source)
    job = cluster.drain_job(source)
    assert job["status_name"] == "SUCCEEDED" and job["succeeded_units"] >= len(on_source)
    with pytest.raises(TargetError, match="UNAVAILABLE_IN_CURRENT_STATUS"):
        cluster.drain_segment(source)
    assert f"{source}: " in cluster.logs() and '"status_name": "SUCCEEDED"' in cluster.logs()
