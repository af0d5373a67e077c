"""The cluster file a lab writes: what the cluster target observes, plus how to drive it.

Written with tomli-w and read back through ``pytest_mooncake.schemas.cluster_manifest`` before
the lab uses it, so a lab never hands out a file its own loader would refuse. Every permission
is allowed: the lab is ours to break.

Engines publish the segment names the suites use (``ENGINES``), spread over the nodes, each
``lifecycle = "per_test"``: the cluster target gives every test fresh engine processes, as the
local targets do. The first three are started by ``up``; the others (the rolling upgrade's
``seg-w``/``seg-r``) only when a test asks for them. One store client runs on every node, and
the project's Toxiproxy-compatible server on the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from pytest_mooncake.lab.flavours import ETCD_CLIENT_PORT, Flavour, Placed, etcd_member, toxiproxy
from pytest_mooncake.lab.layout import LabLayout
from pytest_mooncake.schemas.cluster_manifest import (
    ACTIONS,
    TARGET_PERMISSIONS,
    ClusterFile,
    parse_cluster,
)

ENGINES = [("seg-a", True), ("seg-b", True), ("seg-c", True), ("seg-w", False),
           ("seg-r", False)]
"""(segment, started by ``up``) in placement order: engine i runs on node i mod N."""


@dataclass(frozen=True)
class Topology:
    """Which roles run where: etcd members on the first nodes, masters on the first nodes,
    engines spread over every node, a store client on every node."""

    etcd: int = 1
    masters: int = 2
    engines: bool = True
    clients: bool = True

    def check(self, nodes: int) -> Topology:
        if not 1 <= self.etcd <= nodes:
            raise ValueError(f"--etcd {self.etcd}: between 1 and --nodes ({nodes})")
        if not 0 <= self.masters <= nodes:
            raise ValueError(f"--masters {self.masters}: between 0 and --nodes ({nodes})")
        return self


@dataclass
class Plan:
    """The components of a lab in start order and the file's text."""

    etcd: list[Placed] = field(default_factory=list)
    services: list[Placed] = field(default_factory=list)
    """Started with the masters: the Toxiproxy server."""
    masters: list[Placed] = field(default_factory=list)
    engines: list[Placed] = field(default_factory=list)
    """Engines ``up`` starts."""
    idle_engines: list[Placed] = field(default_factory=list)
    """Engines described for the cluster target to start when a test asks for them."""
    clients: list[Placed] = field(default_factory=list)
    document: dict[str, Any] = field(default_factory=dict)


def plan(layout: LabLayout, flavour: Flavour, topology: Topology) -> Plan:
    nodes = layout.all_nodes()
    members = nodes[:topology.etcd]
    endpoints = [f"{m.address}:{ETCD_CLIENT_PORT}" for m in members]
    cluster_id = f"mclab-{layout.name}"
    p = Plan()
    p.etcd = [etcd_member(m, members, cluster_id) for m in members]
    proxy = toxiproxy(nodes[0])
    p.services = [proxy]
    p.masters = [flavour.master(n, endpoints, cluster_id) for n in nodes[:topology.masters]]
    if topology.engines:
        slots: dict[str, int] = {}
        for i, (segment, started) in enumerate(ENGINES):
            node = nodes[i % len(nodes)]
            slot = slots.get(node.name, 0)
            slots[node.name] = slot + 1
            placed = flavour.engine(node, segment, slot, endpoints)
            (p.engines if started else p.idle_engines).append(placed)
    if topology.clients and p.masters:
        p.clients = [flavour.client(n, f"client-{n.name}", 0, endpoints, cluster_id)
                     for n in nodes]
    described = p.etcd + p.services + p.masters + p.engines + p.idle_engines + p.clients
    p.document = {
        "cluster": {"name": f"lab-{layout.name}", "version": flavour.name,
                    "controller_address": layout.host_address},
        "etcd": {"endpoints": endpoints, "components": [e.component.name for e in p.etcd]},
        "masters": [{**m.entry, "component": m.component.name} for m in p.masters],
        "engines": [{**e.entry, "component": e.component.name}
                    for e in p.engines + p.idle_engines],
        "clients": [{**c.entry, "component": c.component.name} for c in p.clients],
        "toxiproxy": {"url": proxy.entry["url"]},
        "nodes": [{"name": n.name, "host": n.address, "port": 22, "user": "root",
                   "key": str(layout.client_key), "known_hosts": str(layout.known_hosts),
                   "address": n.address, "run_dir": n.run_dir, "lab_link": n.link,
                   "connect_timeout": 10.0, "command_timeout": 30.0} for n in nodes],
        "components": [_component(c.component.model_dump(exclude_none=True))
                       for c in described],
        "faults": {"allow": list(TARGET_PERMISSIONS) + list(ACTIONS), "firewall": "auto"},
        "lab": {"name": layout.name, "subnet": str(layout.subnet),
                "state": str(layout.state_file), "flavour": flavour.name},
    }
    for table in ("masters", "engines", "clients"):
        if not p.document[table]:
            del p.document[table]
    return p


def _component(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v not in ({}, None)}


def write(path: Path, document: dict[str, Any]) -> ClusterFile:
    """Write the file and read it back through the schema (a file we would refuse is a bug)."""
    header = ("# Written by `python -m pytest_mooncake.lab up`; removed by `lab down`.\n"
              "# Use with --mc-target=cluster:THIS_FILE and python -m pytest_mooncake.cluster.\n")
    path.write_text(header + tomli_w.dumps(document))
    return parse_cluster(document, path)
