"""Node control for the cluster target: the components a cluster file links to its engines,
masters and store clients, driven over SSH through ``pytest_mooncake.nodes``.

Every action is first checked against the file's ``[faults].allow``; one the operator did not
allow is ``TargetLacks`` (the test is n/a) naming the allow entry that would permit it, before
anything happens. A node that cannot be reached, or a component that will not start, raises
``TargetError`` with what the node said. The fleet (one SSH session per node, the fault
ledger) is opened on first use and closed with the target, which heals what the run left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from pytest_mooncake.nodes import ComponentError, Fleet, NodeError
from pytest_mooncake.nodes.proc_sockets import Socket
from pytest_mooncake.schemas.cluster_manifest import ClusterFile
from pytest_mooncake.targets.base import Capability, TargetError, TargetLacks


def not_allowed(file: ClusterFile, action: str, kind: str | None, what: str,
                capability: Capability) -> TargetLacks | None:
    """The n/a for ``action`` on a component of ``kind`` where the file does not allow it."""
    entry = file.faults.missing(action, kind)
    if entry is None:
        return None
    either = f'"{entry}" (or "{action}")' if kind else f'"{action}"'
    return TargetLacks(capability, (
        f"cluster:{file.path} does not allow {what}: [faults].allow = "
        f"{sorted(file.allow)} lacks {either}"))


class FleetHolder:
    """The cluster file's ``Fleet``, opened on first use (nothing is reached before a test asks
    for node control) and closed with the target (healing what the run left outstanding)."""

    def __init__(self, file: ClusterFile):
        self.file = file
        self._fleet: Fleet | None = None
        self.healed: list[str] = []

    def get(self) -> Fleet:
        if self._fleet is None:
            self._fleet = Fleet(self.file, run=f"target-{os.getpid()}-{int(time.time())}")
        return self._fleet

    def close(self) -> None:
        if self._fleet is not None:
            outcomes = self._fleet.close()
            self.healed = [f"{o.entry.id} {o.entry.fault}: {o.what}" for o in outcomes]
            self._fleet = None


class ComponentControl:
    """One ``[[components]]`` entry, driven on its node."""

    def __init__(self, fleet: FleetHolder, name: str, capability: Capability):
        self.fleet = fleet
        self.file = fleet.file
        self.name = name
        self.spec = self.file.component(name)
        self.capability = capability

    @property
    def kind(self) -> str:
        return self.spec.kind

    def require(self, action: str, what: str) -> None:
        lacks = not_allowed(self.file, action, self.kind, f"{what} {self.name}",
                            self.capability)
        if lacks is not None:
            raise lacks

    def _node(self) -> Any:
        return self.fleet.get().node_of(self.name)

    def _do(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (NodeError, ComponentError) as exc:
            raise TargetError(f"cluster:{self.file.path}: {what} {self.name}: {exc}") from None

    def startable(self) -> str | None:
        """None when the run can start it; else why not."""
        if not self.spec.startable:
            return (f"component {self.name} of cluster:{self.file.path} is an operator's "
                    f"process (no `start` or `unit`): it can be killed but not started again")
        return None

    def start(self, env: Mapping[str, str] | None = None, timeout: float | None = None) -> None:
        self.require("restart", "start")
        why = self.startable()
        if why:
            raise TargetLacks(self.capability, why)
        self._do("start", lambda: self._node().start(self.name, timeout=timeout, env=env))

    def stop(self, fault: bool = True) -> str:
        """SIGTERM; ``fault=False`` when it only returns to the state it should have (not a
        fault for the ledger to undo)."""
        self.require("restart", "stop")
        return self._do("stop", lambda: self._node().stop(self.name, fault=fault))

    def kill(self, fault: bool = True) -> list[int]:
        self.require("kill", "kill")
        return self._do("kill -9", lambda: self._node().kill(self.name, fault=fault))

    def pause(self) -> list[int]:
        self.require("pause", "pause")
        return self._do("pause", lambda: self._node().pause(self.name))

    def resume(self) -> list[int]:
        self.require("pause", "resume")
        return self._do("resume", lambda: self._node().resume(self.name))

    def settle(self, why: str) -> None:
        """Its outstanding down/pause faults need no undo (it is where it should be: ``why``)."""
        fleet = self.fleet.get()
        fleet.faults.came_back(self.spec.node, self.name, note=why)

    def ensure_running(self) -> str:
        """Start it again if it is down (a test's teardown): says what it did."""
        return self._do("start", lambda: self._node().ensure_running(self.name))

    def state(self) -> str:
        return self._do("find", lambda: self._node().state(self.name))

    def running(self) -> bool:
        return self.state() == "running"

    def pids(self) -> list[int]:
        return self._do("find", lambda: self._node().pids(self.name))

    def logs(self, lines: int = 200) -> str:
        self.require("logs", "read the log of")
        return self._do("read the log of", lambda: self._node().logs(self.name, lines))

    def log_or_note(self, lines: int = 200) -> str:
        """The log where the file allows reading it, else a line saying why not."""
        lacks = not_allowed(self.file, "logs", self.kind, f"reading the log of {self.name}",
                            self.capability)
        if lacks is not None:
            return f"({lacks.reason})"
        try:
            return self.logs(lines)
        except TargetError as exc:
            return f"(log of {self.name} unavailable: {exc})"

    def sockets(self) -> list[Socket]:
        return self._do("read the sockets of", lambda: self._node().sockets(self.name))

    def reachable(self) -> str | None:
        """None when its node answers over SSH; else what went wrong (a probe)."""
        try:
            self._node().run("true", timeout=self._node().spec.connect_timeout + 5)
        except NodeError as exc:
            return str(exc)
        return None
