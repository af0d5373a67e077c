"""Node control over SSH: a cluster's machines, the components on them, faults and their ledger.

``Fleet`` (one cluster file) -> ``Node`` (run / start / stop / kill / pause / resume / restart /
logs / pids / state of a component) and ``Faults`` (partition / isolate / isolate_from_etcd /
heal / heal_all / sweep, each checked against ``[faults].allow`` and written to the ledger
before it is applied). The cluster file's schema, node tables included, is
``pytest_mooncake.schemas.cluster_manifest``.
Nothing here imports pytest; the remote side needs only sshd and POSIX shell tools.
"""

from pytest_mooncake.nodes.faults import Fault, Faults, HealOutcome
from pytest_mooncake.nodes.fleet import Fleet
from pytest_mooncake.nodes.ledger import Ledger
from pytest_mooncake.nodes.node import Node
from pytest_mooncake.nodes.node_errors import (
    CommandFailed,
    CommandTimeout,
    ComponentError,
    FaultNotAllowed,
    NodeError,
    NodeUnreachable,
)
from pytest_mooncake.schemas.cluster_manifest import (
    ClusterFile,
    FaultsTable,
    ManifestError,
    load_manifest,
)
from pytest_mooncake.schemas.cluster_nodes import ComponentSpec, NodeSpec

__all__ = [
    "ClusterFile", "CommandFailed", "CommandTimeout", "ComponentError", "ComponentSpec", "Fault",
    "FaultNotAllowed", "Faults", "FaultsTable", "Fleet", "HealOutcome", "Ledger", "ManifestError",
    "Node", "NodeError", "NodeSpec", "NodeUnreachable", "load_manifest",
]
