"""The cluster file's node tables: what they accept, and errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.nodes.schema import NodesFileError, load_nodes, parse_nodes

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
    spec = parse_nodes(BASE, tmp_path / "c.toml")
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


def test_other_tables_are_left_to_the_cluster_target(tmp_path):
    spec = parse_nodes(with_(cluster={"name": "x"}, toxiproxy={"url": "http://127.0.0.1:8474"},
                             lab={"name": "lab"}), tmp_path / "c.toml")
    assert spec.nodes


@pytest.mark.parametrize("change, message", [
    ({"faults": {"allow": ["explode"]}}, r"\[faults\]\.allow\[0\]: unknown permission 'explode'"),
    ({"faults": {"allow": ["kill:router"]}}, r"unknown permission 'kill:router'"),
    ({"nodes": BASE["nodes"] + [{"name": "n1", "host": "h"}]}, r"\[\[nodes\]\]: name\(s\) listed "
                                                               r"twice: n1"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n9", "start": "x"}],
      "engines": [], "etcd": {}}, r"\[\[components\]\]\[0\] \(e\): node 'n9' is not in \[\[nodes\]\]"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x", "unit": "u"}],
      "engines": [], "etcd": {}}, "give exactly one of `start`"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x",
                      "log": "relative.log"}], "engines": [], "etcd": {}},
     r"\[\[components\]\]\[0\]\.log: .*absolute path"),
    ({"components": [{"name": "e", "kind": "engine", "node": "n1", "start": "x", "match": "("}],
      "engines": [], "etcd": {}}, "not a regular expression"),
    ({"engines": [{"segment": "s", "control": "h:1", "component": "etcd-n1"}]},
     r"\[\[engines\]\]\[0\]\.component: component 'etcd-n1' is a etcd, not a engine"),
    ({"etcd": {"components": ["nope"]}}, r"\[etcd\]\.components\[0\]: no \[\[components\]\] "
                                         r"entry named 'nope'"),
    ({"nodes": [{"name": "n1", "host": "h", "port": 70000}]}, r"\[\[nodes\]\]\[0\]\.port"),
    ({"nodes": [{"name": "n1", "host": "h", "colour": "red"}]}, r"\[\[nodes\]\]\[0\]\.colour: "
                                                                r"Extra inputs"),
])
def test_errors_name_the_field(tmp_path, change, message):
    with pytest.raises(NodesFileError, match=message) as err:
        parse_nodes(with_(**change), tmp_path / "bad.toml")
    assert str(err.value).startswith(f"{tmp_path / 'bad.toml'}: ")


def test_file_errors(tmp_path):
    with pytest.raises(NodesFileError, match="no such cluster file"):
        load_nodes(tmp_path / "missing.toml")
    (tmp_path / "broken.toml").write_text("[[nodes]\n")
    with pytest.raises(NodesFileError, match="not valid TOML"):
        load_nodes(tmp_path / "broken.toml")


def test_the_documented_example_reads():
    root = Path(__file__).resolve().parents[2]
    spec = load_nodes(root / "pytest_mooncake/data/clusters/nodes-example.toml")
    readme = (root / "README.md").read_text()
    assert (root / "pytest_mooncake/data/clusters/nodes-example.toml").read_text().split("\n\n", 1)[1] in readme
    assert [n.name for n in spec.nodes] == ["n1", "n2", "n3"]
    assert spec.component("engine-n1").ready_tcp == "10.0.0.11:7000"
    assert spec.faults.permits("pause", "master") and not spec.faults.permits("pause", "engine")
