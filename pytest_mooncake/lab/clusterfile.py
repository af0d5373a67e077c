"""The cluster file a lab writes: what the cluster target observes, plus how to drive it.

Written with tomli-w and read back through ``pytest_mooncake.nodes.schema`` before the lab
uses it, so a lab never hands out a file its own loader would refuse. Every node-control
permission is allowed: the lab is ours to break.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from pytest_mooncake.lab.flavours import ETCD_CLIENT_PORT, Flavour, Placed, etcd_member
from pytest_mooncake.lab.layout import LabLayout
from pytest_mooncake.nodes.schema import ACTIONS, TARGET_PERMISSIONS, NodesFile, parse_nodes

#: engine aliases in node order, the segment names suites ask for
ALIASES = [["seg-a", "A"], ["seg-b", "B"], ["seg-c", "C"]]


@dataclass(frozen=True)
class Topology:
    """Which roles run where: etcd members on the first nodes, masters on the first nodes,
    an engine on every node."""

    etcd: int = 1
    masters: int = 2
    engines: bool = True

    def check(self, nodes: int) -> Topology:
        if not 1 <= self.etcd <= nodes:
            raise ValueError(f"--etcd {self.etcd}: between 1 and --nodes ({nodes})")
        if not 0 <= self.masters <= nodes:
            raise ValueError(f"--masters {self.masters}: between 0 and --nodes ({nodes})")
        return self


@dataclass
class Plan:
    """The components of a lab in start order (etcd, masters, engines) and the file's text."""

    etcd: list[Placed] = field(default_factory=list)
    masters: list[Placed] = field(default_factory=list)
    engines: list[Placed] = field(default_factory=list)
    document: dict[str, Any] = field(default_factory=dict)


def plan(layout: LabLayout, flavour: Flavour, topology: Topology) -> Plan:
    nodes = layout.all_nodes()
    members = nodes[:topology.etcd]
    endpoints = [f"{m.address}:{ETCD_CLIENT_PORT}" for m in members]
    p = Plan()
    p.etcd = [etcd_member(m, members, f"mclab-{layout.name}") for m in members]
    p.masters = [flavour.master(n, endpoints, f"mclab-{layout.name}")
                 for n in nodes[:topology.masters]]
    if topology.engines:
        p.engines = [flavour.engine(n, f"seg-{n.name}", ALIASES[i] if i < len(ALIASES) else [],
                                    endpoints) for i, n in enumerate(nodes)]
    p.document = {
        "cluster": {"name": f"lab-{layout.name}", "version": flavour.name},
        "etcd": {"endpoints": endpoints, "components": [e.component.name for e in p.etcd]},
        "masters": [{**m.entry, "component": m.component.name} for m in p.masters],
        "engines": [{**e.entry, "component": e.component.name} for e in p.engines],
        "nodes": [{"name": n.name, "host": n.address, "port": 22, "user": "root",
                   "key": str(layout.client_key), "known_hosts": str(layout.known_hosts),
                   "address": n.address, "run_dir": n.run_dir, "lab_link": n.link,
                   "connect_timeout": 10.0, "command_timeout": 30.0} for n in nodes],
        "components": [_component(c.component.model_dump(exclude_none=True))
                       for c in p.etcd + p.masters + p.engines],
        "faults": {"allow": list(TARGET_PERMISSIONS) + list(ACTIONS), "firewall": "auto"},
        "lab": {"name": layout.name, "subnet": str(layout.subnet),
                "state": str(layout.state_file), "flavour": flavour.name},
    }
    if not p.masters:
        del p.document["masters"]
    if not p.engines:
        del p.document["engines"]
    return p


def _component(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v not in ({}, None)}


def write(path: Path, document: dict[str, Any]) -> NodesFile:
    """Write the file and read it back through the schema (a file we would refuse is a bug)."""
    header = ("# Written by `python -m pytest_mooncake.lab up`; removed by `lab down`.\n"
              "# Use with --mc-target=cluster:THIS_FILE and python -m pytest_mooncake.cluster.\n")
    path.write_text(header + tomli_w.dumps(document))
    return parse_nodes(document, path)
