"""``MasterClusterHandle`` over the masters and store clients of an existing deployment (the
cluster target): read through the masters' admin services (``master_cluster/admin_view``), killed, stopped,
started, paused and read on their nodes through the components the cluster file links, within
what its ``[faults].allow`` permits.

A handle is one test's view: it attaches to the listed masters and to the first ``clients``
listed store clients; with clients it first empties the store through the serving leader (a
test counts the keys it wrote), which the ``store`` permission allows. When the test ends it
brings back what the test took down (masters and clients started again, paused ones resumed)
and waits for a leader, so the next test finds the deployment as this one did.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_mooncake.runtime.deadlines import TRANSIENT, wait_until
from pytest_mooncake.schemas.cluster_manifest import ClientEntry, ClusterFile
from pytest_mooncake.targets.base import Capability, MasterEndpoint, TargetError, TargetLacks
from pytest_mooncake.targets.mooncake.deployment.control_wires import STORE_WIRES
from pytest_mooncake.targets.mooncake.deployment.node_control import (
    ComponentControl,
    FleetHolder,
    not_allowed,
)
from pytest_mooncake.targets.mooncake.master_cluster.admin_view import MooncakeMasters
from pytest_mooncake.targets.mooncake.master_cluster.http_admin import admin_get
from pytest_mooncake.targets.mooncake.option_rules import lacks_etcd_routing

LEADER_WAIT = 60.0
"""How long a handle waits for a serving leader when it attaches and when it restores the
deployment (an HA master warms up for one lease TTL before it serves)."""


def _needs(file: ClusterFile, action: str, kind: str | None, what: str) -> None:
    lacks = not_allowed(file, action, kind, what, Capability.MASTER_CLUSTER)
    if lacks is not None:
        raise lacks


class DeploymentClient:
    """A store client of the deployment (``StoreClientHandle``) through its control channel;
    killed and stopped on its node."""

    def __init__(self, index: int, entry: ClientEntry, file: ClusterFile, fleet: FleetHolder):
        self.index = index
        self.entry = entry
        self.file = file
        self.node = (ComponentControl(fleet, entry.component, Capability.MASTER_CLUSTER)
                     if entry.component else None)
        try:
            self.wire = STORE_WIRES[entry.protocol].at(index, entry.control)
        except (OSError, ValueError, RuntimeError) as exc:
            raise TargetError(f"store client {index} of cluster:{file.path} does not answer "
                              f"on {entry.control} ({entry.protocol} protocol): {exc}") from None
        self.took_down = False

    @property
    def hostname(self) -> str:
        return self.wire.hostname

    def put(self, key: str, size: int = 64) -> Any:
        return self.wire.put(key, size)

    def get(self, key: str) -> Any:
        return self.wire.get(key)

    def exists(self, key: str) -> Any:
        return self.wire.exists(key)

    def remove(self, key: str, force: bool = False) -> Any:
        return self.wire.remove(key, force)

    def _control(self, action: str) -> ComponentControl:
        if self.node is None:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"store client {self.index} of cluster:{self.file.path} links no component; "
                f"the run cannot {action} it"))
        return self.node

    def kill(self) -> None:
        node = self._control("kill")
        self.wire.close()
        node.kill()
        self.took_down = True

    def stop(self) -> None:
        node = self._control("stop")
        self.wire.close()
        node.stop()
        self.took_down = True

    def alive(self) -> bool:
        if self.node is None:
            return True
        try:
            return self.node.running()
        except TargetError:
            return False

    def restore(self) -> None:
        """Start it again if the test took it down, and reconnect."""
        if self.took_down and self.node is not None:
            self.node.ensure_running()
            self.wire = STORE_WIRES[self.entry.protocol].at(self.index, self.entry.control)
            self.took_down = False

    def log(self) -> str:
        return self.node.log_or_note(30) if self.node is not None else "(no component)"


class DeploymentMasters(MooncakeMasters):
    """The deployment's masters and store clients, for one test."""

    def __init__(self, file: ClusterFile, fleet: FleetHolder, build: str, masters: int,
                 clients: int):
        self.file = file
        self.fleet = fleet
        self.masters = list(file.masters)
        self.build = build
        self.where = f"cluster:{file.path}'s masters"
        self.drain_jobs: dict[str, str] = {}
        self.etcd = list(file.etcd.endpoints)
        self.nodes = [ComponentControl(fleet, m.component, Capability.MASTER_CLUSTER)
                      if m.component else None for m in self.masters]
        self.took_down: set[int] = set()
        self.paused: set[int] = set()
        if masters > len(self.masters):
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"cluster:{file.path} lists {len(self.masters)} master(s); the test needs "
                f"{masters}"))
        if clients:
            _needs(file, "store", None, "driving store clients and emptying the store")
            if clients > len(file.clients):
                raise TargetLacks(Capability.MASTER_CLUSTER, (
                    f"cluster:{file.path} lists {len(file.clients)} store client(s) "
                    f"([[clients]]); the test needs {clients}, and the cluster target starts "
                    f"none of its own"))
        self.clients = [DeploymentClient(i, file.clients[i], file, fleet)
                        for i in range(clients)]
        if self.clients:
            self._empty_store()

    # ------------------------------------------------------------------ reading

    def admin_url(self, index: int) -> str:
        return self.masters[index].admin

    def observed(self) -> list[int]:
        """The masters that can answer: not taken down, not paused (a SIGSTOPped master holds
        its admin socket and answers nothing)."""
        return [i for i in range(len(self.masters))
                if i not in self.took_down and i not in self.paused]

    def _require_serving(self, index: int, what: str) -> None:
        """Probed per master: one that lists its keys (``/get_all_keys`` answers 200, as the
        reference master's standby does) counts them too; one that refuses while not serving
        (0.3.13: 503 'service plane is not active') is n/a as ``MooncakeMasters`` says."""
        status, _ = admin_get(self.admin_url(index) + "/get_all_keys", timeout=10.0)
        if status != 200:
            super()._require_serving(index, what)

    def keys(self, index: int) -> list[str]:
        """Keys of master ``index``: ``/get_all_keys`` as lines (mooncake_master) or as
        ``{"keys": [...]}`` (the reference master)."""
        status, body = admin_get(self.admin_url(index) + "/get_all_keys", timeout=10.0)
        if status != 200:
            self._require_serving(index, "key list")
            raise TargetError(f"GET /get_all_keys of master {index} answered {status}: "
                              f"{body[:200]}")
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("keys"), list):
            return [str(k) for k in doc["keys"]]
        return [line.strip() for line in body.splitlines() if line.strip()]

    def _empty_store(self) -> None:
        """Remove every object the leader lists (earlier tests' and the operator's: the test
        counts its own), then wait until the leader lists none."""
        leader = self.leader(timeout=LEADER_WAIT)
        for key in self.keys(leader):
            self.clients[0].remove(key, force=True)

        def empty() -> bool:
            return not self.keys(self.leader(timeout=LEADER_WAIT))

        wait_until(empty, 30.0, f"{self.where}: the store to be empty before the test",
                   ignore=TRANSIENT)

    # ------------------------------------------------------------------ driving masters

    def _node(self, index: int, action: str) -> ComponentControl:
        node = self.nodes[index]
        if node is None:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"master {index} ({self.masters[index].admin}) of cluster:{self.file.path} links "
                f"no component; the run cannot {action} it"))
        return node

    def kill_master(self, index: int) -> None:
        self._node(index, "kill").kill()
        self.took_down.add(index)

    def stop_master(self, index: int) -> None:
        self._node(index, "stop").stop()
        self.took_down.add(index)

    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        if etcd is not None:
            raise lacks_etcd_routing("start_master(etcd=...)", (
                f"cluster:{self.file.path} starts its masters with their own command lines"))
        if index is None:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"cluster:{self.file.path} lists {len(self.masters)} masters; the run starts "
                f"those again but adds none"))
        node = self._node(index, "start")
        if node.running():
            raise TargetError(f"master {index} is already running")
        node.start()
        self.took_down.discard(index)
        return index

    def pause_master(self, index: int) -> None:
        """SIGSTOP master ``index``."""
        self._node(index, "pause").pause()
        self.paused.add(index)

    def resume_master(self, index: int) -> None:
        self._node(index, "resume").resume()
        self.paused.discard(index)

    def master_log(self, index: int) -> str:
        return self._node(index, "read the log of").logs()

    # ------------------------------------------------------------------ clients

    def start_client(self, client_id: str | None = None, version: str | None = None,
                     wait_attached: bool = True) -> Any:
        if version is not None:
            raise TargetLacks(Capability.CLIENT_VERSION, (
                f"cluster:{self.file.path}'s store clients announce their own build's version; "
                f"the run starts no client announcing {version}"))
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"cluster:{self.file.path}: the run attaches to the listed store clients "
            f"([[clients]]) and starts none of its own"))

    def client(self, index: int = 0) -> DeploymentClient:
        if index >= len(self.clients):
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"this handle attached {len(self.clients)} store client(s) of "
                f"cluster:{self.file.path}; ask master_cluster(clients={index + 1})"))
        return self.clients[index]

    def client_segment(self, index: int) -> str:
        """The segment store client ``index`` mounted, as the leader lists it."""
        name = self.client(index).hostname
        try:
            names = {s.get("segment_name"): s for s in self.segments_detail()}
        except TargetError as exc:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"{self.where} list no segments: {exc}")) from None
        if name in names:
            return name
        by_endpoint = [n for n, s in names.items() if s.get("te_endpoint") == name]
        if by_endpoint:
            return str(by_endpoint[0])
        raise TargetError(f"store client {index} ({name}) has no segment in the leader's "
                          f"/get_segments_detail (segments: {sorted(map(str, names))})")

    def drain_segment(self, segment: str) -> None:
        """Drain ``segment`` through the leader: changes the operator's store, so it needs
        the ``store`` permission."""
        _needs(self.file, "store", None, "draining segments")
        super().drain_segment(segment)

    def endpoint(self) -> MasterEndpoint:
        raise TargetLacks(Capability.FOREIGN_MASTER, (
            f"cluster:{self.file.path} observes the deployment's masters; it does not let "
            f"store clients of another target attach to them"))

    # ------------------------------------------------------------------ teardown

    def logs(self) -> str:
        parts = []
        for i, m in enumerate(self.masters):
            parts.append(f"== master {i} {m.admin}: {self.health(i) if i not in self.took_down else 'down'}")
            if self.nodes[i] is not None:
                parts.append(self.nodes[i].log_or_note(60))
        for c in self.clients:
            parts.append(f"== store client {c.index} ({c.entry.control})\n{c.log()}")
        return "\n".join(parts)

    def close(self) -> None:
        """Bring back what the test took down, then wait for a serving leader."""
        problems = []
        for index in sorted(self.paused):
            try:
                self.resume_master(index)
            except (TargetError, TargetLacks) as exc:
                problems.append(f"resume master {index}: {exc}")
        for index in sorted(self.took_down):
            try:
                self._node(index, "start").ensure_running()
                self.took_down.discard(index)
            except (TargetError, TargetLacks) as exc:
                problems.append(f"start master {index}: {exc}")
        for c in self.clients:
            try:
                c.restore()
            except (TargetError, TargetLacks, OSError) as exc:
                problems.append(f"start store client {c.index}: {exc}")
            c.wire.close()
        if problems:
            raise TargetError(f"cluster:{self.file.path}: could not restore what the test took "
                              f"down: {'; '.join(problems)}")
        self.leader(timeout=LEADER_WAIT)
