"""Kubernetes on paper: manifests for an operator's Mooncake cluster, generated from a cluster
file and validated offline, and how the nemesis would map to pods.

``python -m pytest_mooncake.kube_manifests render FILE --image IMAGE`` writes the manifests
(``workloads.py``: etcd, masters as a Deployment with HA on etcd or Redis, engines as a
StatefulSet whose pod names are the segment names); ``check MANIFESTS.yaml`` validates them
against Kubernetes' own schemas without a server (``schema_check.py``: ``kubernetes-validate``,
since ``kubectl --dry-run=client`` still asks a server for its OpenAPI document);
``nemesis`` prints the fault-to-pod mapping (``pod_nemesis.py``). Nothing here talks to a
cluster: it is the design for the day one is at hand, kept honest by the schema check.
"""
