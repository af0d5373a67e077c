"""Node control over SSH: a cluster's machines, the components on them, faults and their ledger.

``Fleet`` (one cluster file) -> ``Node`` (run / start / stop / kill / pause / resume / restart /
logs / pids / state of a component) and ``Faults`` (partition / isolate / isolate_from_etcd /
heal / heal_all / sweep, each checked against ``[faults].allow`` and written to the ledger
before it is applied). ``schema`` holds the cluster file's node tables as pydantic models.
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
    NodesFileError,
    NodeUnreachable,
)
from pytest_mooncake.nodes.schema import ComponentSpec, FaultsSpec, NodesFile, NodeSpec, load_nodes

__all__ = [
    "CommandFailed", "CommandTimeout", "ComponentError", "ComponentSpec", "Fault",
    "FaultNotAllowed", "Faults", "FaultsSpec", "Fleet", "HealOutcome", "Ledger", "Node",
    "NodeError", "NodeSpec", "NodeUnreachable", "NodesFile", "NodesFileError", "load_nodes",
]
