"""The cluster file's node tables (one schema with the tables the cluster target observes):
what they accept, and errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.schemas.cluster_manifest import ManifestError, load_manifest, parse_cluster

BASE = {
    "etcd": {"endpoints": ["198.18.0.2:2379"], "components": ["etcd-n1"]},
    "engines": [{"segment": "seg-a", "control": "198.18.0.2:7000", "component": "engine-n1"}],
    "nodes": [{"name": "n1", "host": "198.18.0.2", "key": "~/.ssh/id_ed25519"},
              {"name": "n2", "host": "db2.example", "address": "198.18.0.3", "sudo": True}],
    "components": [
        {"name": "etcd-n1", "kind": "etcd", "node": "n1", "start": "exec etcd"},
        {"name": "engine-n1", "kind": "engine", "node": "n1", "start": "exec engine",
         "env": {"MC_TCP_BIND_ADDRESS": "198.18.0.2"}, "ready_tcp": "198.18.0.2:7000"},
        {"name": "master-n2", "kind": "master", "node": "n2", "unit": "mooncake-master.service",
         "match": "mooncake_master --rpc_port 50051"},
    ],
    "faults": {"allow": ["observe", "transfers", "logs", "kill:engine", "partition"]},
}


def with_(**changes):
    return {**BASE, **changes}


def test_a_full_file_reads_back(tmp_path):
    spec = parse_cluster(BASE, tmp_path / "c.toml")
    n1, n2 = spec.nodes
    assert n1.key == Path("~/.ssh/id_ed25519").expanduser() and n1.port == 22
    assert n1.peer_address == "198.18.0.2" and n2.peer_address == "198.18.0.3"
    engine = spec.component("engine-n1")
    assert engine.pid_path(n1) == "/tmp/mooncake-nodes/engine-n1.pid"
    assert engine.log_path(n1) == "/tmp/mooncake-nodes/engine-n1.log"
    master = spec.component("master-n2")
    assert master.pid_path(n2) is None and master.log_path(n2) is None  # journalctl
    assert spec.faults.permits("kill", "engine") and not spec.faults.permits("kill", "master")
    assert spec.faults.permits("partition") and not spec.faults.permits("pause", "engine")
    assert spec.ledger_path == tmp_path / "c.toml.ledger"
    assert [c.name for c in spec.components_of("engine")] == ["engine-n1"]


def test_one_schema_reads_every_table(tmp_path):
    spec = parse_cluster(with_(cluster={"name": "x"}, toxiproxy={"url": "http://127.0.0.1:8474"},
                               lab={"name": "lab", "subnet": "198.18.0.0/24", "state": "/s",
                                    "flavour": "reference"}), tmp_path / "c.toml")
    assert spec.nodes and spec.name == "x" and spec.lab.name == "lab"
    assert spec.engine_entry("seg-a").component == "engine-n1"
    with pytest.raises(ManifestError, match=r"field 'colour': unknown field \(known: clients, cluster, "):
        parse_cluster(with_(colour="red"), tmp_path / "c.toml")


@pytest.mark.parametrize("change, message", [
    ({"faults": {"allow": ["explode"]}}, r"field 'faults.allow\[0\]': unknown permission 'explode'"),
    ({"faults": {"allow": ["kill:router"]}}, r"unknown permission 'kill:router'"),
    ({"nodes": BASE["nodes"] + [{"name": "n1", "host": "h"}]},
     r"field 'nodes': name\(s\) listed twice: n1"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n9", "start": "x"}],
      "engines": [], "etcd": {}},
     r"field 'components\[0\].node': component e: node 'n9' is not in \[\[nodes\]\]"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x", "unit": "u"}],
      "engines": [], "etcd": {}}, "give one of `start`"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1"}], "engines": [], "etcd": {}},
     "needs `pid_file` or `match` to be found"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x",
                      "log": "relative.log"}], "engines": [], "etcd": {}},
     r"field 'components\[0\].log': .*absolute path"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x", "match": "("}],
      "engines": [], "etcd": {}}, "not a regular expression"),
    ({"engines": [{"segment": "s", "control": "h:1", "component": "etcd-n1"}]},
     r"field 'engines\[0\].component': component 'etcd-n1' is of kind etcd, not engine"),
    ({"engines": [{"segment": "s", "lifecycle": "per_test"}]},
     r"field 'engines\[0\].lifecycle': engine s: per_test needs a component"),
    ({"clients": [{"control": "h:1", "component": "engine-n1"}]},
     r"field 'clients\[0\].component': component 'engine-n1' is of kind engine, not client"),
    ({"etcd": {"components": ["nope"]}},
     r"field 'etcd.components\[0\]': no \[\[components\]\] entry named 'nope'"),
    ({"nodes": [{"name": "n1", "host": "h", "port": 70000}]}, r"field 'nodes\[0\].port'"),
    ({"nodes": [{"name": "n1", "host": "h", "colour": "red"}]},
     r"field 'nodes\[0\].colour': unknown field \(known: address, command_timeout"),
])
def test_errors_name_the_field(tmp_path, change, message):
    with pytest.raises(ManifestError, match=message) as err:
        parse_cluster(with_(**change), tmp_path / "bad.toml")
    assert str(err.value).startswith(f"{tmp_path / 'bad.toml'}: ")


def test_file_errors(tmp_path):
    with pytest.raises(ManifestError, match="no such cluster file"):
        load_manifest(tmp_path / "missing.toml")
    (tmp_path / "broken.toml").write_text("[[nodes]\n")
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_manifest(tmp_path / "broken.toml")


def test_the_documented_example_reads():
    root = Path(__file__).resolve().parents[2]
    spec = load_manifest(root / "pytest_mooncake/data/clusters/nodes-example.toml")
    page = (root / "docs" / "how-to" / "chaos-on-a-cluster.md").read_text()
    assert '--8<-- "pytest_mooncake/data/clusters/nodes-example.toml"' in page, \
        "the how-to shows the shipped example file itself (a snippet include)"
    assert [n.name for n in spec.nodes] == ["n1", "n2", "n3"]
    assert spec.component("engine-n1").ready_tcp == "10.0.0.11:7000"
    assert spec.faults.permits("pause", "master") and not spec.faults.permits("pause", "engine")
