"""How the nemesis's faults map to pods: what the suites do to processes and containers here,
written as what an operator's cluster would need (``kubectl`` against the manifests of
``workloads.py``). Every node-control action of a cluster file (``ACTIONS``) and the metadata
faults have an entry; nothing runs it yet."""

from __future__ import annotations

from pytest_mooncake.schemas.cluster_manifest import ACTIONS

NEMESIS: dict[str, tuple[str, str]] = {
    "kill": ("kubectl exec POD -- kill -9 1  (the process only: the pod, its IP and name stay, "
             "as the docker target's holder keeps a container); or kubectl delete pod POD "
             "--grace-period=0 --force (a host lost: the StatefulSet brings it back under the "
             "same name at a new IP)",
             "SIGKILL of the component (ContainerProcess.kill)"),
    "restart": ("kubectl delete pod POD (graceful: SIGTERM, then the controller starts a new "
                "pod; an engine comes back under the same segment name)",
                "a new container of the same name and address (ContainerProcess.start)"),
    "pause": ("kubectl exec POD -- kill -STOP 1 / kill -CONT 1 (needs a shell in the image; "
              "the images built here have one)",
              "SIGSTOP/SIGCONT of the component"),
    "partition": ("a NetworkPolicy selecting the pod's labels with empty ingress and egress "
                  "(needs a CNI that enforces policies), deleted to heal",
                  "network disconnect of the container (ContainerProcess.partition/heal)"),
    "logs": ("kubectl logs POD [--previous for the process before a restart]",
             "the container's log"),
    "metadata_faults": ("a Toxiproxy Deployment and Service in front of the etcd Service; the "
                        "engines' --metadata URL names the proxy (what the relays and the fault "
                        "proxy do here)",
                        "Toxiproxy on 127.0.0.1 with TCP relays to the containers"),
}
"""fault -> (on Kubernetes, what the docker target does here)."""


def unmapped() -> list[str]:
    """Node-control actions of the cluster file that have no entry (a test keeps this empty)."""
    return [a for a in ACTIONS if a not in NEMESIS]


def table() -> str:
    rows = [f"{fault:16} {k8s}\n{'':16} here: {here}" for fault, (k8s, here) in NEMESIS.items()]
    return "\n".join(rows)
