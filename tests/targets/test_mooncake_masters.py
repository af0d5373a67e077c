"""Real ``mooncake_master`` HA pairs on ``mc_etcd`` and real ``mooncake.store`` clients."""

from __future__ import annotations

import os
import time

import pytest

from pytest_mooncake.runtime.prometheus_text import parse_metrics
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.targets.base import Capability
from pytest_mooncake.targets.mooncake.master_cluster.oplog_planting import (
    PUT_END,
    OpLogInEtcd,
    decode_object_payload,
    memory_buffer,
)
from pytest_mooncake.targets.mooncake.store_clients import payload
from pytest_mooncake.waits import wait_until

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_mooncake_masters")


@pytest.fixture(scope="module")
def cluster(mooncake_target):
    if mooncake_target.missing(Capability.MASTER_CLUSTER):
        pytest.skip("n/a: " + mooncake_target.missing(Capability.MASTER_CLUSTER))
    c = mooncake_target.master_cluster(masters=2, clients=1)
    yield c
    c.close()


def test_ha_pair_elects_a_leader_and_serves_a_store_client(cluster):
    leader = cluster.leader(timeout=30)
    assert cluster.standbys() == [1 - leader]
    view = cluster.leader_view()
    assert view["present"] and cluster.index_of(view["leader_address"]) == leader
    client = cluster.client()
    key = f"basic-{os.getpid()}"
    assert client.put(key, 100)["ok"]
    got = client.get(key)
    assert got["ok"] and got["result"]["data"] == payload(key, 100)
    assert client.exists(key)["result"]["exists"] is True
    assert client.exists(key + "-absent")["result"]["exists"] is False
    assert not client.get(key + "-absent")["ok"]
    assert cluster.key_count(leader) >= 1
    assert key in cluster.keys(leader)
    with pytest.raises(TargetLacks) as standby_count:
        cluster.key_count(1 - leader)
    assert "service plane is not active" in standby_count.value.reason
    with pytest.raises(TargetLacks) as skew:
        cluster.start_client("skewed", version="0.1.0")
    assert skew.value.capability is Capability.CLIENT_VERSION
    metrics = cluster.metrics(leader)
    assert "master_key_count" in metrics and "ha_state_transitions_total" in metrics
    leased = client.remove(key)
    assert not leased["ok"] and leased["result"]["rc"] != 0  # 0.3.13: the put's lease holds it
    assert client.remove(key, force=True)["ok"]
    assert client.exists(key)["result"]["exists"] is False


def test_promotability_is_probed_live_and_reported_missing_not_invented(cluster):
    """0.3.13's admin service answers 404 on every promotability path: the live probe says
    so (TargetLacks of ``promotability``: n/a where it is a means, FAIL under MP-3's
    ``mc_demands``; tests/plugin/test_verdict_rule.py). A master that does not answer is an
    ObservationFailed, never n/a."""
    standby = cluster.standbys()[0]
    with pytest.raises(TargetLacks) as lacks:
        cluster.promotable(standby)
    assert lacks.value.capability is Capability.PROMOTABILITY
    assert "exposes no promotability predicate" in lacks.value.reason
    assert "GET /ha/promotable -> 404" in lacks.value.reason


def test_standby_progress_is_seen_from_its_applied_sequence_and_etcd(cluster):
    """A 0.3.13 standby reports master_key_count 0, but its ha_oplog_applied_sequence_id
    follows the leader's durable OpLog prefix in etcd: replication() reads both."""
    leader = cluster.leader(timeout=30)
    standby = cluster.standbys()[0]
    client = cluster.client()
    for i in range(3):
        assert client.put(f"progress-{os.getpid()}-{i}", 64)["ok"]
    at = wait_until(lambda: (r := cluster.replication(standby))["applied_seq"] >= r["primary_seq"]
                    > 0 and r, 30, "the standby to apply the leader's durable prefix")
    assert at["role"] == "standby" and at["lag"] == 0
    assert cluster.replication(leader)["primary_seq"] == at["primary_seq"]


def test_sigkill_of_the_leader_observed(mooncake_target, request):
    """What 0.3.13 does when the serving leader is SIGKILLed (observed, then asserted): the
    standby takes over with a higher view version, restores the object it followed through the
    OpLog, and the client reads it again; the killed master restarts as a standby."""
    cluster = mooncake_target.master_cluster(masters=2, clients=1)
    request.addfinalizer(cluster.close)
    old = cluster.leader(timeout=30)
    before = cluster.leader_view()["view_version"]
    client = cluster.client()
    key = f"failover-{os.getpid()}"
    assert client.put(key, 256)["ok"]
    wait_until(lambda: cluster.metrics(1 - old).get("ha_oplog_applied_sequence_id", 0) >= 1,
             30, "OpLog entry applied by the standby")
    started = time.monotonic()
    cluster.kill_master(old)
    new = cluster.leader(timeout=60)
    took = time.monotonic() - started
    assert new == 1 - old
    assert cluster.leader_view()["view_version"] > before
    assert cluster.key_count(new) >= 1
    got = wait_until(lambda: (r := client.get(key))["ok"] and r, 30, f"get {key} after failover")
    assert got["result"]["data"] == payload(key, 256)
    cluster.start_master(old)
    wait_until(lambda: cluster.health(old).get("role") == "standby", 30, "old leader as standby")
    assert cluster.serving() == [new]
    print(f"0.3.13 failover after SIGKILL of the leader: serving again after {took:.1f}s")


def test_metrics_parser_keeps_labels_and_skips_junk():
    text = ("# HELP x\n# TYPE x counter\nmaster_key_count 3\n"
            'ha_state{role="leader"} 1.5\nbroken line here\n\nnan_value NaN\n')
    parsed = parse_metrics(text)
    assert parsed["master_key_count"] == 3.0
    assert parsed['ha_state{role="leader"}'] == 1.5
    assert "broken line" not in parsed and "broken" not in parsed


def test_a_planted_descriptor_lands_where_the_standby_replays_it(mooncake_target, request):
    """0.3.13 keeps its OpLog in etcd: planting is a capability of the build, and
    plant_bad_descriptor appends the next batch there, encoded as the build's own records, so
    the standby applies it (its applied sequence reaches the planted entry's) while the leader's
    index never holds the key. A victim the OpLog never logged is n/a, said as what etcd held."""
    assert mooncake_target.missing(Capability.MASTER_FAULT_PLANTING) is None
    cluster = mooncake_target.master_cluster(masters=2, clients=1)
    request.addfinalizer(cluster.close)
    leader = cluster.leader(timeout=30)
    (standby,) = cluster.standbys()
    client = cluster.client()
    for i in range(3):
        assert client.put(f"victim-{i}", 64)["ok"]
    before = wait_until(lambda: (r := cluster.replication(standby))["applied_seq"]
                        >= r["primary_seq"] > 0 and r, 30, "the standby to apply the puts")
    with pytest.raises(TargetLacks) as unlogged:
        cluster.plant_bad_descriptor("never-written")
    assert unlogged.value.capability is Capability.MASTER_FAULT_PLANTING
    assert "logged no PUT_END for 'never-written'" in unlogged.value.reason
    elsewhere = cluster.plant_bad_descriptor("victim-0", key="planted-elsewhere",
                                             kind="unknown_segment")
    assert elsewhere == before["primary_seq"] + 1
    seq = cluster.plant_bad_descriptor("victim-1", key="planted-overlap")
    assert seq == elsewhere + 1
    at = wait_until(lambda: (r := cluster.replication(standby))["applied_seq"] >= seq and r, 30,
                    "the standby to apply the planted entry")
    assert at["primary_seq"] == seq and at["role"] == "standby"
    oplog = OpLogInEtcd(cluster.etcd, cluster.oplog_cluster)
    request.addfinalizer(oplog.close)
    assert oplog.unplantable() is None
    (planted,) = oplog.batches()[-1].entries
    victim = [e for b in oplog.batches() for e in b.entries if e.key == "victim-1"][-1]
    assert (planted.key, planted.op_type, len(planted.payload)) == \
        ("planted-overlap", victim.op_type, len(victim.payload))
    assert planted.payload != victim.payload  # the buffer address moved half the size up
    (unmounted,) = oplog.batches()[-2].entries
    endpoint = cluster.replica_segments("victim-0")[0].encode()
    assert unmounted.key == "planted-elsewhere" and endpoint not in unmounted.payload
    assert not {"planted-overlap", "planted-elsewhere"} & set(cluster.keys(leader))


def test_an_object_beside_a_valid_replica_is_planted_as_two_replicas_the_standby_reads(
        mooncake_target, request):
    """``overlap_beside_valid`` on a real build: a spare object is put and removed through the
    leader, and the planted PUT_END holds two replicas, the spare's as the build logged it and
    the victim's moved half its size up; the standby applies it without a decoding error."""
    cluster = mooncake_target.master_cluster(masters=2, clients=1)
    request.addfinalizer(cluster.close)
    leader = cluster.leader(timeout=30)
    (standby,) = cluster.standbys()
    assert cluster.client().put("victim", 64)["ok"]
    seq = cluster.plant_bad_descriptor("victim", key="planted-beside", kind="overlap_beside_valid")
    wait_until(lambda: cluster.replication(standby)["applied_seq"] >= seq, 30,
               "the standby to apply the planted entry")
    oplog = OpLogInEtcd(cluster.etcd, cluster.oplog_cluster)
    request.addfinalizer(oplog.close)
    logged = {e.key: e for b in oplog.batches() for e in b.entries if e.op_type == PUT_END}
    freed, moved = decode_object_payload(logged["planted-beside"].payload).replicas
    assert freed == decode_object_payload(logged["planted-beside-spare"].payload).replicas[0]
    (own,) = decode_object_payload(logged["victim"].payload).replicas
    assert memory_buffer(moved) == {**memory_buffer(own), "f1": memory_buffer(own)["f1"] + 32}
    assert not {"planted-beside", "planted-beside-spare"} & set(cluster.keys(leader))
    assert "planted-beside" not in "".join(
        line for line in cluster.master_log(standby).splitlines() if "deserialize" in line)


def test_a_planted_removal_is_replayed_by_the_standby_and_not_applied_by_the_leader(
        mooncake_target, request):
    """``plant_removal`` on a real build: modelled on a REMOVE the build logged (none logged
    yet: n/a naming that), appended as the next batch; the standby applies it, the leader
    still serves the key, and once the leader is killed the promoted standby does not."""
    cluster = mooncake_target.master_cluster(masters=2, clients=1)
    request.addfinalizer(cluster.close)
    leader = cluster.leader(timeout=30)
    (standby,) = cluster.standbys()
    client = cluster.client()
    for key in ("kept", "doomed", "spare"):
        assert client.put(key, 64)["ok"]
    with pytest.raises(TargetLacks) as unmodelled:
        cluster.plant_removal("doomed")
    assert "logged no REMOVE (op 3)" in unmodelled.value.reason
    assert client.remove("spare", force=True)["ok"]  # the build's own REMOVE, the model
    wait_until(lambda: (r := cluster.replication(standby))["applied_seq"]
               >= r["primary_seq"] > 0, 30, "the standby to apply the puts and the remove")
    seq = cluster.plant_removal("doomed")
    at = wait_until(lambda: (r := cluster.replication(standby))["applied_seq"] >= seq and r,
                    30, "the standby to apply the planted removal")
    assert at["primary_seq"] == seq
    oplog = OpLogInEtcd(cluster.etcd, cluster.oplog_cluster)
    request.addfinalizer(oplog.close)
    (planted,) = oplog.batches()[-1].entries
    model = [e for b in oplog.batches() for e in b.entries if e.key == "spare"][-1]
    assert (planted.key, planted.op_type, planted.payload) == ("doomed", 3, model.payload)
    assert "doomed" in cluster.keys(leader), "the leader applied a removal it was never told of"
    cluster.kill_master(leader)
    new = cluster.leader(timeout=60)
    served = wait_until(lambda: (keys := cluster.keys(new)) and "kept" in keys and keys, 30,
                        "the promoted standby to serve 'kept'")
    assert "doomed" not in served, f"the promoted standby serves the planted removal's key: {served}"
