"""The manifests of one Mooncake cluster on Kubernetes, from a cluster file.

- etcd: a StatefulSet (stable member names) and a Service; the metadata store engines publish
  to, and the masters' HA backend unless ``ha="redis"``;
- masters: a Deployment of ``len([[masters]])`` replicas (at least 2: HA needs a standby),
  ``mooncake_master --enable_ha=true`` on etcd (``--etcd_endpoints``) or Redis
  (``--ha_backend_type=redis --ha_backend_connstring``, where the build has Redis: the PyPI
  wheels of 0.3.13.post1/0.3.14 refuse it), each listening on its pod IP; the flags the file's
  ``[[masters]].flags`` give (they must agree: one Deployment, one command line);
- engines: a StatefulSet of ``len([[engines]])`` replicas running the same driver the docker
  target runs (``mooncake_driver.py`` from a ConfigMap); a pod's name is its segment name, and a
  deleted pod comes back under the same name (same segment, new process), as a restarted
  container does under the docker target;
- a headless Service per StatefulSet, and one in front of the masters' admin port.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.schemas.cluster_manifest import ClusterFile
from pytest_mooncake.targets.mooncake.install import DRIVER

ETCD_PORT = 2379
REDIS_PORT = 6379
MASTER_RPC_PORT = 50051
MASTER_ADMIN_PORT = 9003
ENGINE_CONTROL_PORT = 7000
HA_BACKENDS = ("etcd", "redis")
DEFAULT_REDIS_IMAGE = "redis:7"
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
POD_NAME = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


class ManifestInputError(ValueError):
    """The cluster file or an option cannot give manifests; the message says which."""


def dns_name(text: str) -> str:
    """``text`` as a DNS-1123 label prefix (lower case, digits, '-'; at most 40 characters,
    leaving room for the suffixes added here)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40].strip("-")
    if not name:
        raise ManifestInputError(f"cluster name {text!r} has no letter or digit to name "
                                 f"Kubernetes objects by")
    return name


def master_flags(cluster: ClusterFile) -> dict[str, str]:
    """The ``[[masters]].flags`` every master shares (one Deployment runs one command line)."""
    seen = [{k: _flag_value(v) for k, v in m.flags.items()} for m in cluster.masters]
    if any(s != seen[0] for s in seen[1:]):
        raise ManifestInputError(
            f"{cluster.path}: [[masters]] run with different flags ({seen}); a Deployment runs "
            f"one command line: give every master the same flags")
    return seen[0] if seen else {}


def _flag_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _labels(prefix: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "mooncake", "app.kubernetes.io/instance": prefix,
            "app.kubernetes.io/component": component}


def _meta(name: str, labels: Mapping[str, str], namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _service(name: str, labels: Mapping[str, str], ports: Mapping[str, int],
             namespace: str | None, headless: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": dict(labels),
                            "ports": [{"name": n, "port": p, "targetPort": p}
                                      for n, p in ports.items()]}
    if headless:
        spec["clusterIP"] = "None"
        spec["publishNotReadyAddresses"] = True
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, labels, namespace),
            "spec": spec}


def _pod_template(labels: Mapping[str, str], container: dict[str, Any],
                  volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 5}
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def etcd(prefix: str, image: str, namespace: str | None) -> list[dict[str, Any]]:
    name = f"{prefix}-etcd"
    labels = _labels(prefix, "etcd")
    container = {
        "name": "etcd", "image": image,
        "command": ["etcd"],
        "args": ["--name=$(POD_NAME)", "--data-dir=/var/lib/etcd",
                 f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
                 f"--advertise-client-urls=http://$(POD_NAME).{name}:{ETCD_PORT}"],
        "env": [POD_NAME],
        "ports": [{"name": "client", "containerPort": ETCD_PORT}],
        "readinessProbe": {"tcpSocket": {"port": ETCD_PORT}, "periodSeconds": 2},
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
    }
    return [
        _service(name, labels, {"client": ETCD_PORT}, namespace, headless=True),
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(name, labels, namespace),
         "spec": {"serviceName": name, "replicas": 1, "selector": {"matchLabels": labels},
                  "template": _pod_template(labels, container,
                                            [{"name": "data", "emptyDir": {}}])}},
    ]


def redis(prefix: str, image: str, namespace: str | None) -> list[dict[str, Any]]:
    name = f"{prefix}-redis"
    labels = _labels(prefix, "redis")
    container = {"name": "redis", "image": image,
                 "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
                 "readinessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 2}}
    return [
        _service(name, labels, {"redis": REDIS_PORT}, namespace, headless=False),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, labels, namespace),
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": _pod_template(labels, container)}},
    ]


def masters(prefix: str, image: str, cluster: ClusterFile, ha: str,
            namespace: str | None) -> list[dict[str, Any]]:
    name = f"{prefix}-master"
    labels = _labels(prefix, "master")
    flags = {"enable_ha": "true", "cluster_id": prefix, "rpc_address": "$(POD_IP)",
             "rpc_port": str(MASTER_RPC_PORT), "metrics_host": "0.0.0.0",
             "metrics_port": str(MASTER_ADMIN_PORT)}
    if ha == "etcd":
        flags["etcd_endpoints"] = f"{prefix}-etcd:{ETCD_PORT}"
    else:
        flags["ha_backend_type"] = "redis"
        flags["ha_backend_connstring"] = f"redis://{prefix}-redis:{REDIS_PORT}"
    fixed = set(flags)
    for key, value in master_flags(cluster).items():
        if key in fixed and value != flags[key]:
            raise ManifestInputError(
                f"{cluster.path}: [[masters]].flags sets --{key}, which the manifests set "
                f"themselves (--{key}={flags[key]}): remove it from the file")
        flags[key] = value
    container = {
        "name": "mooncake-master", "image": image, "command": ["mooncake_master"],
        "args": [f"--{k}={v}" for k, v in flags.items()],
        "env": [POD_IP, {"name": "MC_TCP_BIND_ADDRESS", "value": "$(POD_IP)"}],
        "ports": [{"name": "rpc", "containerPort": MASTER_RPC_PORT},
                  {"name": "admin", "containerPort": MASTER_ADMIN_PORT}],
        "livenessProbe": {"tcpSocket": {"port": MASTER_ADMIN_PORT}, "periodSeconds": 5},
    }
    return [
        _service(f"{name}-admin", labels, {"admin": MASTER_ADMIN_PORT}, namespace,
                 headless=True),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, labels, namespace),
         "spec": {"replicas": max(2, len(cluster.masters)), "selector": {"matchLabels": labels},
                  "template": _pod_template(labels, container)}},
    ]


def engines(prefix: str, image: str, cluster: ClusterFile,
            namespace: str | None) -> list[dict[str, Any]]:
    name = f"{prefix}-engine"
    labels = _labels(prefix, "engine")
    driver = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": _meta(f"{prefix}-driver", _labels(prefix, "driver"), namespace),
              "data": {DRIVER.name: DRIVER.read_text()}}
    container = {
        "name": "engine", "image": image, "command": ["python3"],
        "args": [f"/mc-driver/{DRIVER.name}", "engine", "--segment", "$(POD_NAME)",
                 "--metadata", f"etcd://{prefix}-etcd:{ETCD_PORT}",
                 "--ready-file", "/tmp/engine-ready", "--control-host", "$(POD_IP)",
                 "--control-port", str(ENGINE_CONTROL_PORT)],
        "env": [POD_NAME, POD_IP, {"name": "MC_TCP_BIND_ADDRESS", "value": "$(POD_IP)"}],
        "ports": [{"name": "control", "containerPort": ENGINE_CONTROL_PORT}],
        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/engine-ready"]},
                           "periodSeconds": 2},
        "volumeMounts": [{"name": "driver", "mountPath": "/mc-driver", "readOnly": True}],
    }
    volumes = [{"name": "driver", "configMap": {"name": f"{prefix}-driver"}}]
    return [
        driver,
        _service(name, labels, {"control": ENGINE_CONTROL_PORT}, namespace, headless=True),
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(name, labels, namespace),
         "spec": {"serviceName": name, "replicas": max(1, len(cluster.engines)),
                  "podManagementPolicy": "Parallel", "selector": {"matchLabels": labels},
                  "template": _pod_template(labels, container, volumes)}},
    ]


def manifests(cluster: ClusterFile, image: str, ha: str = "etcd", namespace: str | None = None,
              redis_image: str = DEFAULT_REDIS_IMAGE) -> list[dict[str, Any]]:
    """Every object of the cluster, in the order ``kubectl apply`` should create them."""
    if ha not in HA_BACKENDS:
        raise ManifestInputError(f"--ha={ha!r}: the masters' HA backend is one of "
                                 f"{', '.join(HA_BACKENDS)}")
    if not image.strip():
        raise ManifestInputError("--image is empty: name the Mooncake image the pods run "
                                 "(e.g. localhost/mooncake:0.3.13.post1)")
    prefix = dns_name(cluster.name)
    docs = etcd(prefix, image, namespace)
    if ha == "redis":
        docs += redis(prefix, redis_image, namespace)
    return docs + masters(prefix, image, cluster, ha, namespace) + engines(
        prefix, image, cluster, namespace)
