"""The cluster target drives the lab through node control: per-test engines started, killed and
restarted over SSH, masters killed and brought back, store clients attached, metadata traffic
routed through the lab's Toxiproxy, an operator's engine observed without a control channel,
and every fault the file does not allow n/a naming the allow entry."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w
import tomllib

from pytest_mooncake.runtime.toxiproxy_process import api_request
from pytest_mooncake.targets import resolve_target
from pytest_mooncake.targets.base import Capability, TargetContext, TargetLacks
from pytest_mooncake.waits import wait_until


def cluster_target(path: Path, tmp_path: Path):
    target = resolve_target(f"cluster:{path}")
    target.open(TargetContext(seed=1, workdir=tmp_path))
    return target


@pytest.fixture
def lab_target(mc_lab, tmp_path):
    target = cluster_target(mc_lab.cluster_file, tmp_path)
    yield target
    target.close()


def variant(mc_lab, tmp_path: Path, change) -> Path:
    """A copy of the lab's cluster file with ``change(doc)`` applied (same nodes, own ledger)."""
    doc = tomllib.loads(Path(mc_lab.cluster_file).read_text())
    change(doc)
    doc.setdefault("faults", {})["ledger"] = str(tmp_path / "variant.ledger")
    path = tmp_path / "variant.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def test_per_test_engines_are_fresh_and_killed_and_restarted_over_ssh(lab_target, mc_lab):
    assert {Capability.ENGINE, Capability.ENGINE_RESTART, Capability.CACHE_CONTROL,
            Capability.ENGINE_COUNTERS, Capability.METADATA_FAULTS,
            Capability.MASTER_CLUSTER} <= lab_target.capabilities
    meta = lab_target.metadata_store("etcd")
    a = lab_target.start_engine("seg-a", meta)
    b = lab_target.start_engine("seg-b", meta, ttl_ms=200)
    first = a.descriptor()["instance_id"]
    assert b.write("seg-a", 0, b"across-the-lab").ok
    assert a.local_read(0, 14) == b"across-the-lab"
    a.kill()
    assert not a.alive()
    a.restart()
    assert a.alive() and a.descriptor()["instance_id"] != first
    wait_until(lambda: b.write("seg-a", 0, b"after-restart!").ok
               and a.local_read(0, 14) == b"after-restart!", 15, "B's writes to reach the new A")
    assert b.stats()["replacements"] >= 1
    listening = {s.local for s in a.sockets() if s.listening}
    host = mc_lab.plan.engines[0].component.ready_tcp.rpartition(":")[0]
    assert (host, 7000) in listening, listening
    assert '"event": "ready"' in a.logs()
    a.stop()
    b.stop()
    assert a.node.state() == "absent" and b.node.state() == "absent"
    fleet = lab_target.placement.fleet.get()
    assert fleet.ledger.outstanding(fleet.run) == []


def test_a_new_test_gets_a_new_process(lab_target):
    meta = lab_target.metadata_store("etcd")
    a = lab_target.start_engine("seg-c", meta)
    pid = a.pid
    a.stop()
    again = lab_target.start_engine("seg-c", meta)
    try:
        assert again.pid != pid and again.alive()
    finally:
        again.stop()


def test_masters_killed_and_brought_back_and_clients_attached(lab_target):
    cluster = lab_target.master_cluster(masters=2, clients=1)
    try:
        leader = cluster.leader(timeout=30)
        assert cluster.client(0).put("lab-key", 64)["ok"]
        assert cluster.keys(leader) == ["lab-key"]
        cluster.kill_master(leader)
        new = cluster.leader(timeout=30)
        assert new != leader
        wait_until(lambda: cluster.client(0).put("after-kill", 64)["ok"], 20,
                   "the client to write through the new leader")
        assert cluster.master_log(new).strip(), "the new leader's log is empty"
    finally:
        cluster.close()
    assert all(node.running() for node in cluster.nodes)
    again = lab_target.master_cluster(masters=2, clients=1)
    try:
        assert again.keys(again.leader(timeout=30)) == [], "a new handle starts on an empty store"
    finally:
        again.close()


def test_an_engine_paused_and_resumed_over_ssh(lab_target):
    meta = lab_target.metadata_store("etcd")
    a = lab_target.start_engine("seg-a", meta)
    b = lab_target.start_engine("seg-b", meta)
    fleet = lab_target.placement.fleet.get()
    try:
        a.pause()
        assert a.node.state() == "paused"
        assert [(e.fault["kind"], e.fault["component"])
                for e in fleet.ledger.outstanding(fleet.run)] == [("pause", "engine-seg-a")]
        a.resume()
        assert a.node.state() == "running" and fleet.ledger.outstanding(fleet.run) == []
        assert b.write("seg-a", 0, b"after-resume!!").ok
        assert a.local_read(0, 14) == b"after-resume!!"
    finally:
        a.stop()
        b.stop()


def test_a_paused_leader_is_replaced_and_steps_down_after_resume(lab_target):
    """Jepsen's pause: the leader SIGSTOPped over SSH loses its lease, the standby serves and
    the client writes through it; SIGCONT brings the old leader back as a standby."""
    cluster = lab_target.master_cluster(masters=2, clients=1)
    fleet = lab_target.placement.fleet.get()
    try:
        leader = cluster.leader(timeout=30)
        cluster.pause_master(leader)
        assert cluster.nodes[leader].state() == "paused"
        assert [e.fault["kind"] for e in fleet.ledger.outstanding(fleet.run)] == ["pause"]
        new = cluster.leader(timeout=60)
        assert new != leader
        wait_until(lambda: cluster.client(0).put("while-paused", 64)["ok"], 30,
                   "the client to write through the new leader")
        cluster.resume_master(leader)
        assert fleet.ledger.outstanding(fleet.run) == []
        wait_until(lambda: cluster.health(leader).get("role") == "standby", 30,
                   "the resumed old leader to step down")
        assert cluster.leader(timeout=30) == new
    finally:
        cluster.close()


def test_metadata_routed_through_the_labs_toxiproxy(lab_target, mc_lab):
    url = lab_target.toxiproxy_url
    meta = lab_target.metadata_store("etcd")
    host = url.split("//")[1].rpartition(":")[0]
    status, made = api_request(url, "POST", "/proxies", {
        "name": "route-test", "upstream": meta.address, "listen": f"{host}:0", "enabled": True})
    assert status == 201, made
    try:
        a = lab_target.start_engine("seg-a", meta)
        b = lab_target.start_engine("seg-b", meta.through(made["listen"]), ttl_ms=100)
        assert b.write("seg-a", 0, b"via-the-proxy!").ok
        proxy_port = int(made["listen"].rpartition(":")[2])
        assert any(s.remote == (host, proxy_port) for s in b.sockets() if s.established)
        assert b.lookup("seg-a", force=True).ok
        assert api_request(url, "POST", "/proxies/route-test", {"enabled": False})[0] == 200
        looked = b.lookup("seg-a", force=True)
        assert not looked.ok, "a forced lookup through the disabled proxy succeeded"
        a.stop()
        b.stop()
    finally:
        api_request(url, "DELETE", "/proxies/route-test")


def test_attached_engines_cannot_be_rerouted(mc_lab, tmp_path):
    path = variant(mc_lab, tmp_path, lambda d: [e.update(lifecycle="attach")
                                                for e in d["engines"]])
    target = cluster_target(path, tmp_path)
    try:
        assert "lifecycle = \"per_test\"" in target.missing(Capability.METADATA_FAULTS)
    finally:
        target.close()


def test_a_fault_the_file_does_not_allow_is_na_naming_the_entry(mc_lab, tmp_path):
    def restrict(doc):
        doc["faults"]["allow"] = [a for a in doc["faults"]["allow"] if a not in ("kill", "store")]
    target = cluster_target(variant(mc_lab, tmp_path, restrict), tmp_path)
    try:
        reason = target.missing(Capability.ENGINE_RESTART)
        assert 'lacks "kill:engine" (or "kill")' in reason
        meta = target.metadata_store("etcd")
        with pytest.raises(TargetLacks, match=r'lacks "kill:engine" \(or "kill"\)'):
            target.start_engine("seg-a", meta)
        with pytest.raises(TargetLacks, match='lacks "store"'):
            target.master_cluster(masters=2, clients=1)
        cluster = target.master_cluster(masters=2, clients=0)
        with pytest.raises(TargetLacks, match=r'lacks "kill:master" \(or "kill"\)'):
            cluster.kill_master(cluster.leader(timeout=30))
        cluster.close()
    finally:
        target.close()


def test_an_operators_engine_is_observed_without_a_control_channel(mc_lab, tmp_path):
    """An engine the run did not start and cannot drive: the file names it by segment and
    finds its process by a command-line match; descriptor, liveness, sockets and log are read,
    transfers are n/a naming what is missing."""
    lab = cluster_target(mc_lab.cluster_file, tmp_path / "lab")
    engine = lab.start_engine("seg-c", lab.metadata_store("etcd"))  # the "operator's" process

    def observe_only(doc):
        comp = next(c for c in doc["components"] if c["name"] == "engine-seg-c")
        doc["components"] = [c for c in doc["components"] if c["name"] != "engine-seg-c"]
        doc["components"].append({"name": "operators-engine", "kind": "engine",
                                  "node": comp["node"], "match": comp["match"],
                                  "log": f"{comp['cwd']}/engine-seg-c.log"})
        doc["engines"] = [{"segment": "seg-c", "component": "operators-engine",
                           "aliases": ["C"]}]
        doc["faults"]["allow"] = ["observe", "transfers", "logs"]
    target = cluster_target(variant(mc_lab, tmp_path, observe_only), tmp_path / "observer")
    try:
        meta = target.metadata_store("etcd")
        seen = target.start_engine("C", meta)
        assert seen.segment == "seg-c" and seen.descriptor()["name"] == "seg-c"
        assert meta.segment_key("C") == "mooncake/ram/seg-c"
        assert seen.alive() and seen.pid == engine.pid
        assert any(s.listening for s in seen.sockets())
        assert '"event": "ready"' in seen.logs()
        with pytest.raises(TargetLacks, match="has no control endpoint"):
            seen.write("seg-a", 0, b"x")
        with pytest.raises(TargetLacks, match='lacks "kill:engine"'):
            seen.kill()
        seen.stop()
        assert engine.alive(), "observing an operator's engine stopped it"
    finally:
        target.close()
        engine.stop()
        lab.close()
