"""How to start each component of one flavour (the reference engine, a Mooncake release) on a
lab node: the seam between the lab and what runs on it.

A flavour turns "a master / an engine / a store client on this node" into a component entry of
the cluster file (the command line, its environment, log, readiness) plus the cluster target's
entry for it (master admin/rpc URLs, engine segment and control endpoint, client control
endpoint). The lab starts these components over SSH like any other cluster's. Every process
binds its node's address (``MC_TCP_BIND_ADDRESS`` and its listen flags).

``reference[:PROFILE]``: ``python -m reference_engine engine|master|client`` with this
interpreter (the lab shares the host's filesystem, so the venv is there on every node).
``VERSION`` (a Mooncake release string, e.g. ``0.3.13.post1``): that release's environment from
``pytest_mooncake.releases`` (installed on first use): its ``mooncake_master`` in HA mode with
the flags the release has (``ReleaseFacts.master_args``), and engines and store clients in
``targets/mooncake/driver/mooncake_driver.py`` run by the release's python.

An engine's metadata URI is ``$MC_METADATA`` in its command line (the component's env gives
the lab's etcd), so the cluster target can start it with its metadata traffic routed through a
proxy (``metadata.through``) by setting that variable for one start.
"""

from __future__ import annotations

import re
import shlex
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pytest_mooncake.lab.host import LabError
from pytest_mooncake.lab.layout import NodeLayout
from pytest_mooncake.schemas.cluster_manifest import CacheSetting
from pytest_mooncake.schemas.cluster_nodes import ComponentSpec

ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ENGINE_CONTROL_PORT = 7000
ENGINE_DATA_PORT = 7100
CLIENT_CONTROL_PORT = 7200
CLIENT_DATA_PORT = 7300
MASTER_RPC_PORT = 50051
MASTER_ADMIN_PORT = 9003
TOXIPROXY_PORT = 8474
METADATA_VAR = "MC_METADATA"
DRIVER = (Path(__file__).resolve().parents[1] / "targets" / "mooncake" / "driver"
          / "mooncake_driver.py")
"""The engine/store driver the Mooncake flavour runs with a release's python (a file, not an
import: the lab sits below the targets)."""


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


def toxiproxy(node: NodeLayout, seed: int = 0) -> Placed:
    """The project's Toxiproxy-compatible server on ``node``: proxies a test makes listen on
    the node's address, so engines on any node reach them (the cluster file's [toxiproxy])."""
    a = node.address
    cmd = ["exec", sys.executable, "-m", "pytest_mooncake.toxiproxy", "--listen",
           f"{a}:{TOXIPROXY_PORT}", "--allow-non-loopback", "--seed", str(seed)]
    return Placed(ComponentSpec(
        name=f"toxiproxy-{node.name}", kind="other", node=node.name, start=shlex.join(cmd),
        cwd=node.run_dir, ready_tcp=f"{a}:{TOXIPROXY_PORT}", start_timeout=30,
        stop_timeout=5), {"url": f"http://{a}:{TOXIPROXY_PORT}"})


def _with_metadata(before: list[str], after: list[str]) -> str:
    """A command line with ``--metadata "$MC_METADATA"`` between two quoted parts."""
    return f'{shlex.join(before)} --metadata "${METADATA_VAR}" {shlex.join(after)}'


class Flavour(ABC):
    """What runs Mooncake's roles on a node."""

    name: str
    protocol: str
    """What answers on its engines' and clients' control channels (``driver``/``reference``)."""

    @abstractmethod
    def master(self, node: NodeLayout, etcd: list[str], cluster_id: str) -> Placed: ...

    @abstractmethod
    def engine(self, node: NodeLayout, segment: str, slot: int, etcd: list[str]) -> Placed:
        """An engine publishing ``segment``; ``slot`` numbers the engines of one node (ports)."""

    @abstractmethod
    def client(self, node: NodeLayout, name: str, slot: int, etcd: list[str],
               cluster_id: str) -> Placed: ...

    def _engine_spec(self, node: NodeLayout, segment: str, slot: int, etcd: list[str],
                     command: str, match: str, ready_log: str, env: dict[str, str],
                     **entry: Any) -> Placed:
        a = node.address
        control = f"{a}:{ENGINE_CONTROL_PORT + slot}"
        spec = ComponentSpec(
            name=f"engine-{segment}", kind="engine", node=node.name, start=command,
            env={**env, METADATA_VAR: "etcd://" + ";".join(etcd)}, cwd=node.run_dir,
            match=match, ready_log=ready_log, ready_tcp=control, start_timeout=60,
            stop_timeout=10)
        return Placed(spec, {"segment": segment, "control": control, "protocol": self.protocol,
                             "lifecycle": "per_test", **entry})


class ReferenceFlavour(Flavour):
    """The reference engine, master and store client, run by this interpreter."""

    protocol = "reference"

    def __init__(self, python: str = sys.executable, profile: str = "rfc"):
        self.python = python
        self.profile = profile
        self.name = "reference" if profile == "rfc" else f"reference:{profile}"

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

    def engine(self, node: NodeLayout, segment: str, slot: int, etcd: list[str]) -> Placed:
        a = node.address
        command = "exec " + _with_metadata(
            [self.python, "-m", "reference_engine", "engine", "--name", segment],
            ["--protocol", "tcp", "--profile", self.profile, "--host", a,
             "--control-port", str(ENGINE_CONTROL_PORT + slot),
             "--data-port", str(ENGINE_DATA_PORT + slot)])
        # the lab's nodes share one process table: the address makes the match this node's
        match = (re.escape(f"reference_engine engine --name {segment} ") + ".* --host "
                 + re.escape(a) + " ")
        return self._engine_spec(node, segment, slot, etcd, command, match, '"event": "ready"',
                                 {"MC_TCP_BIND_ADDRESS": a})

    def client(self, node: NodeLayout, name: str, slot: int, etcd: list[str],
               cluster_id: str) -> Placed:
        a = node.address
        control = f"{a}:{CLIENT_CONTROL_PORT + slot}"
        cmd = ["exec", self.python, "-m", "reference_engine", "client", "--etcd", ",".join(etcd),
               "--cluster-id", cluster_id, "--client-id", name, "--control", control,
               "--profile", self.profile]
        spec = ComponentSpec(
            name=name, kind="client", node=node.name, start=shlex.join(cmd),
            env={"MC_TCP_BIND_ADDRESS": a}, cwd=node.run_dir, ready_tcp=control,
            start_timeout=30, stop_timeout=10)
        return Placed(spec, {"control": control, "protocol": self.protocol})


class MooncakeFlavour(Flavour):
    """A Mooncake release from its cached environment (``pytest_mooncake.releases``)."""

    protocol = "driver"

    def __init__(self, release: str, progress: Any = None):
        from pytest_mooncake.releases import ensure_env, facts_of

        try:
            self.env = ensure_env(release, progress=progress)
            self.facts = facts_of(self.env)
        except RuntimeError as exc:  # fetch, stand-in, environment and probe failures
            raise LabError(f"--mooncake {release}: {exc}") from None
        self.name = f"mooncake {self.env.version}"
        self.release = release

    def _env(self, address: str, **extra: str) -> dict[str, str]:
        """The release's environment for a process on a node: its venv on PATH, the libraries
        it needs found, ``MC_TCP_BIND_ADDRESS`` = the node's address; nothing of this shell."""
        return {**self.env.env(base={}, bind_address=address), **extra}

    def master(self, node: NodeLayout, etcd: list[str], cluster_id: str) -> Placed:
        a = node.address
        argv, _dropped = self.facts.master_args(
            {"enable_ha": True, "etcd_endpoints": ";".join(etcd), "cluster_id": cluster_id,
             "rpc_address": a, "rpc_port": MASTER_RPC_PORT, "metrics_host": a,
             "metrics_port": MASTER_ADMIN_PORT, "enable_oplog": True},
            required=("enable_ha", "etcd_endpoints", "rpc_port", "metrics_port"))
        # the lab's nodes share one process table, and every master's command line names the
        # first node's etcd: only a flag that is this node's own address makes the match its own
        own = next((x for x in argv[1:] if x.endswith(f"={a}") and "etcd" not in x), None)
        if own is None:
            raise LabError(f"{self.name}: mooncake_master takes neither --rpc_address nor "
                           f"--metrics_host here, so the lab cannot tell its masters apart")
        spec = ComponentSpec(
            name=f"master-{node.name}", kind="master", node=node.name,
            start="exec " + shlex.join(argv), env=self._env(a), cwd=node.run_dir,
            match=re.escape(argv[0]) + ".* " + re.escape(own) + "( |$)",
            ready_tcp=f"{a}:{MASTER_ADMIN_PORT}", start_timeout=60, stop_timeout=10)
        return Placed(spec, {"admin": f"http://{a}:{MASTER_ADMIN_PORT}",
                             "rpc": f"{a}:{MASTER_RPC_PORT}"})

    def engine(self, node: NodeLayout, segment: str, slot: int, etcd: list[str]) -> Placed:
        a = node.address
        ready = f"{node.run_dir}/engine-{segment}.ready"
        command = "exec " + _with_metadata(
            [str(self.env.python), str(DRIVER), "engine", "--segment", segment],
            ["--ready-file", ready, "--control-host", a,
             "--control-port", str(ENGINE_CONTROL_PORT + slot)])
        match = (re.escape(f"{DRIVER.name} engine --segment {segment} ") + ".*--control-host "
                 + re.escape(a) + " ")
        # the cache settings the release reads (probed in its ELF files): a test's ttl_ms
        # becomes that environment when the cluster target starts the engine
        cache_env = [n for n in get_args(CacheSetting) if self.facts.reads_env(n)]
        return self._engine_spec(node, segment, slot, etcd, command, match, "driver ready:",
                                 self._env(a), cache_env=cache_env)

    def client(self, node: NodeLayout, name: str, slot: int, etcd: list[str],
               cluster_id: str) -> Placed:
        a = node.address
        control = f"{a}:{CLIENT_CONTROL_PORT + slot}"
        uri = "etcd://" + ";".join(etcd)
        cmd = ["exec", str(self.env.python), str(DRIVER), "store",
               "--hostname", f"{a}:{CLIENT_DATA_PORT + slot}", "--metadata", uri,
               "--master", uri, "--ready-file", f"{node.run_dir}/{name}.ready",
               "--control-host", a, "--control-port", str(CLIENT_CONTROL_PORT + slot)]
        spec = ComponentSpec(
            name=name, kind="client", node=node.name, start=shlex.join(cmd),
            env=self._env(a, MC_STORE_CLUSTER_ID=cluster_id), cwd=node.run_dir,
            match=re.escape(f"{DRIVER.name} store --hostname {a}:{CLIENT_DATA_PORT + slot} "),
            ready_log="driver ready:", ready_tcp=control, start_timeout=60, stop_timeout=10)
        return Placed(spec, {"control": control, "protocol": self.protocol})


def flavour_for(spec: str, progress: Any = None) -> Flavour:
    """``reference`` (optionally ``reference:legacy``) or a Mooncake release string
    (``0.3.13.post1``, ``mooncake==0.3.13.post1``, ``mooncake-cuda13==0.3.14``)."""
    kind, _, variant = spec.partition(":")
    if kind == "reference":
        if variant not in ("", "rfc", "legacy"):
            raise ValueError(f"--mooncake {spec}: the reference profiles are rfc and legacy")
        return ReferenceFlavour(profile=variant or "rfc")
    return MooncakeFlavour(spec, progress=progress)
