"""How to start each component of one flavour (the reference engine, a Mooncake release) on a
lab node: the seam between the lab and what runs on it.

A flavour turns "an etcd member / a master / an engine on this node" into a component entry of
the cluster file (the command line, its environment, log, readiness) plus the cluster target's
entry for it (master admin/rpc URLs, engine segment and control endpoint). The lab starts
these components over SSH like any other cluster's.

``reference``: ``python -m reference_engine engine|master`` with this interpreter. A Mooncake
release (``--mooncake 0.3.13.post1``) needs the per-release environments of
``pytest_mooncake.releases``: a ``MooncakeFlavour`` built on one is the next step; until then
asking for a version says so (see ``flavour_for``).
"""

from __future__ import annotations

import re
import shlex
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from pytest_mooncake.lab.layout import NodeLayout
from pytest_mooncake.nodes.schema import ComponentSpec

ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ENGINE_CONTROL_PORT = 7000
ENGINE_DATA_PORT = 7100
MASTER_RPC_PORT = 50051
MASTER_ADMIN_PORT = 9003


@dataclass(frozen=True)
class Placed:
    """A component for the cluster file, and the cluster target's entry that observes it."""

    component: ComponentSpec
    entry: dict[str, Any] = field(default_factory=dict)


def etcd_member(node: NodeLayout, members: list[NodeLayout], token: str) -> Placed:
    """An etcd member from Debian's etcd-server (the same for every flavour)."""
    a = node.address
    cluster = ",".join(f"{m.name}=http://{m.address}:{ETCD_PEER_PORT}" for m in members)
    cmd = ["exec", "etcd", "--name", node.name, "--data-dir", f"{node.run_dir}/etcd",
           "--listen-client-urls", f"http://{a}:{ETCD_CLIENT_PORT}",
           "--advertise-client-urls", f"http://{a}:{ETCD_CLIENT_PORT}",
           "--listen-peer-urls", f"http://{a}:{ETCD_PEER_PORT}",
           "--initial-advertise-peer-urls", f"http://{a}:{ETCD_PEER_PORT}",
           "--initial-cluster", cluster, "--initial-cluster-state", "new",
           "--initial-cluster-token", token]
    return Placed(ComponentSpec(
        name=f"etcd-{node.name}", kind="etcd", node=node.name, start=shlex.join(cmd),
        ready_log="ready to serve client requests", ready_tcp=f"{a}:{ETCD_CLIENT_PORT}",
        start_timeout=30, stop_timeout=10))


class Flavour(ABC):
    """What runs Mooncake's roles on a node."""

    name: str

    @abstractmethod
    def master(self, node: NodeLayout, etcd: list[str], cluster_id: str) -> Placed: ...

    @abstractmethod
    def engine(self, node: NodeLayout, segment: str, aliases: list[str],
               etcd: list[str]) -> Placed: ...


class ReferenceFlavour(Flavour):
    """The reference engine and master, run by this interpreter (the lab shares the host's
    filesystem, so the venv is there on every node)."""

    name = "reference"

    def __init__(self, python: str = sys.executable, profile: str = "rfc"):
        self.python = python
        self.profile = profile

    def master(self, node: NodeLayout, etcd: list[str], cluster_id: str) -> Placed:
        a = node.address
        cmd = ["exec", self.python, "-m", "reference_engine", "master", "--etcd", ",".join(etcd),
               "--cluster-id", cluster_id, "--rpc", f"{a}:{MASTER_RPC_PORT}",
               "--admin", f"{a}:{MASTER_ADMIN_PORT}", "--profile", self.profile]
        spec = ComponentSpec(
            name=f"master-{node.name}", kind="master", node=node.name, start=shlex.join(cmd),
            env={"MC_TCP_BIND_ADDRESS": a}, cwd=node.run_dir,
            ready_tcp=f"{a}:{MASTER_ADMIN_PORT}", start_timeout=30, stop_timeout=10)
        return Placed(spec, {"admin": f"http://{a}:{MASTER_ADMIN_PORT}",
                             "rpc": f"{a}:{MASTER_RPC_PORT}"})

    def engine(self, node: NodeLayout, segment: str, aliases: list[str],
               etcd: list[str]) -> Placed:
        a = node.address
        cmd = ["exec", self.python, "-m", "reference_engine", "engine", "--name", segment,
               "--metadata", "etcd://" + ";".join(etcd), "--protocol", "tcp",
               "--profile", self.profile, "--host", a, "--control-port", str(ENGINE_CONTROL_PORT),
               "--data-port", str(ENGINE_DATA_PORT)]
        spec = ComponentSpec(
            name=f"engine-{node.name}", kind="engine", node=node.name, start=shlex.join(cmd),
            env={"MC_TCP_BIND_ADDRESS": a}, cwd=node.run_dir,
            # the lab's nodes share one process table: the address makes the match this node's
            match=re.escape(f"reference_engine engine --name {segment} ") + ".* --host "
            + re.escape(a) + " ",
            ready_log='"event": "ready"', ready_tcp=f"{a}:{ENGINE_CONTROL_PORT}",
            start_timeout=30, stop_timeout=10)
        return Placed(spec, {"segment": segment, "control": f"{a}:{ENGINE_CONTROL_PORT}",
                             "aliases": aliases})


def flavour_for(spec: str) -> Flavour:
    """``reference`` (optionally ``reference:legacy``) or a Mooncake version."""
    kind, _, variant = spec.partition(":")
    if kind == "reference":
        return ReferenceFlavour(profile=variant or "rfc")
    raise ValueError(
        f"--mooncake {spec}: running a Mooncake release on the lab needs its per-release "
        f"environment (pytest_mooncake.releases, not on this branch yet): a Flavour whose "
        f"master()/engine() start that environment's mooncake_master and engine driver with "
        f"MC_TCP_BIND_ADDRESS set to the node's address. Use --mooncake reference for now.")
