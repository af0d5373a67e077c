"""Kubernetes on paper (``pytest_mooncake/kube_manifests``): manifests generated from a cluster
file pass Kubernetes' own schemas offline, carry the cluster's shape (masters with HA on etcd
or Redis, one engine pod per [[engines]] entry), and the schema check catches a broken one."""

from __future__ import annotations

import copy

import pytest
import yaml

from pytest_mooncake.kube_manifests.__main__ import main
from pytest_mooncake.kube_manifests.pod_nemesis import NEMESIS, unmapped
from pytest_mooncake.kube_manifests.schema_check import problems
from pytest_mooncake.kube_manifests.workloads import ManifestInputError, manifests
from pytest_mooncake.schemas.cluster_manifest import load_manifest, parse_cluster

pytest.importorskip("kubernetes_validate", reason="n/a: pip install kubernetes-validate")

IMAGE = "localhost/mooncake:0.3.13.post1"


def by_kind(docs):
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def container(doc):
    return doc["spec"]["template"]["spec"]["containers"][0]


def test_example_cluster_gives_valid_manifests_of_its_shape():
    cluster = load_manifest("example")
    docs = manifests(cluster, IMAGE)
    assert problems(docs) == []
    objects = by_kind(docs)
    masters = objects[("Deployment", "example-master")]
    engines = objects[("StatefulSet", "example-engine")]
    assert ("StatefulSet", "example-etcd") in objects
    assert masters["spec"]["replicas"] == len(cluster.masters) == 2
    assert engines["spec"]["replicas"] == len(cluster.engines)
    args = container(masters)["args"]
    assert "--enable_ha=true" in args and "--etcd_endpoints=example-etcd:2379" in args
    assert "--rpc_address=$(POD_IP)" in args
    engine_args = container(engines)["args"]
    # the pod's name is the segment name: a deleted pod comes back under it
    assert engine_args[engine_args.index("--segment") + 1] == "$(POD_NAME)"
    assert objects[("ConfigMap", "example-driver")]["data"]["mooncake_driver.py"].startswith('"""')


def test_redis_ha_runs_masters_on_a_redis_service():
    docs = manifests(load_manifest("example"), IMAGE, ha="redis", namespace="mc")
    assert problems(docs) == []
    objects = by_kind(docs)
    args = container(objects[("Deployment", "example-master")])["args"]
    assert "--ha_backend_type=redis" in args
    assert "--ha_backend_connstring=redis://example-redis:6379" in args
    assert not any(a.startswith("--etcd_endpoints") for a in args)
    assert ("Deployment", "example-redis") in objects
    assert {d["metadata"]["namespace"] for d in docs} == {"mc"}


@pytest.mark.parametrize("breakage, named", [
    (lambda sts: sts["spec"].__setitem__("replicas", "two"), "spec.replicas: 'two'"),
    (lambda sts: container(sts).__setitem__("restartPolicyy", "Always"), "restartPolicyy"),
])
def test_the_schema_check_names_what_is_broken(breakage, named):
    docs = copy.deepcopy(manifests(load_manifest("example"), IMAGE))
    engines = by_kind(docs)[("StatefulSet", "example-engine")]
    breakage(engines)
    found = problems(docs)
    assert len(found) == 1 and found[0].startswith("StatefulSet/example-engine: "), found
    assert named in found[0]


def test_masters_flags_from_the_file_and_their_conflicts(tmp_path):
    doc = {"cluster": {"name": "Prod_A"}, "etcd": {"endpoints": ["10.0.0.5:2379"]},
           "masters": [{"admin": "http://10.0.0.1:9003", "flags": {"enable_oplog": True}},
                       {"admin": "http://10.0.0.2:9003", "flags": {"enable_oplog": True}}],
           "engines": [{"segment": "n1"}]}
    docs = manifests(parse_cluster(doc, tmp_path / "prod.toml"), IMAGE)
    master = by_kind(docs)[("Deployment", "prod-a-master")]
    assert "--enable_oplog=true" in container(master)["args"]
    doc["masters"][1]["flags"] = {"enable_oplog": False}
    with pytest.raises(ManifestInputError, match="different flags"):
        manifests(parse_cluster(doc, tmp_path / "prod.toml"), IMAGE)
    doc["masters"][1]["flags"] = doc["masters"][0]["flags"] = {"rpc_port": 1}
    with pytest.raises(ManifestInputError, match="--rpc_port"):
        manifests(parse_cluster(doc, tmp_path / "prod.toml"), IMAGE)
    with pytest.raises(ManifestInputError, match="--ha="):
        manifests(load_manifest("example"), IMAGE, ha="zookeeper")


def test_every_node_control_action_has_a_pod_mapping():
    assert unmapped() == []
    assert "metadata_faults" in NEMESIS


def test_the_command_writes_and_checks_manifests(tmp_path, capsys):
    out = tmp_path / "mc.yaml"
    assert main(["render", "example", "--image", IMAGE, "-o", str(out)]) == 0
    assert "7 objects valid" in capsys.readouterr().err
    assert main(["check", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    docs[0]["spec"]["ports"][0]["port"] = "high"
    out.write_text(yaml.safe_dump_all(docs))
    assert main(["check", str(out)]) == 1
    assert "invalid: Service/example-etcd: spec.ports.0.port" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "missing.toml"), "--image", IMAGE]) == 2
