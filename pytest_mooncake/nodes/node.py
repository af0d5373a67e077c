"""One node: run commands on it, and start, stop, kill, pause, resume and read its components.

Every operation is one POSIX shell script over the node's SSH session (``scripts``), bounded
by a deadline, and failing with an error that names the node, the component, the operation and
what the node printed. Operations that are faults (stop, kill, pause) pass through the fleet's
``Faults`` guard: the cluster file must allow them, and they are written to the ledger before
they happen, so a teardown (or ``python -m pytest_mooncake.cluster heal``) brings back what a run
took down.
"""

from __future__ import annotations

import math
import shlex
import socket
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from pytest_mooncake.nodes import proc_sockets, scripts
from pytest_mooncake.nodes.node_errors import CommandFailed, ComponentError
from pytest_mooncake.nodes.ssh import RemoteResult, SshSessions
from pytest_mooncake.schemas.cluster_nodes import ComponentSpec, NodeSpec


class FaultGuard(Protocol):
    """What a node asks of the fleet's fault guard (``faults.Faults``, which holds the nodes):
    permission, a ledger record around a fault, word that a component runs again. A protocol,
    so that node and guard do not import each other."""

    def require(self, action: str, kind: str | None, what: str) -> None: ...
    def recording(self, kind: str, **detail: Any) -> AbstractContextManager[Any]: ...
    def came_back(self, node: str, component: str,
                  kinds: Sequence[str] = ("down", "pause"), note: str = "came back") -> None: ...


class _Unrecorded:
    """Stands in for a ledger recording when an operation is not a fault."""

    noop = ""


#: slack added to a script's own wait for the SSH round trips around it
_SSH_SLACK = 10.0


class Node:
    """A node of the cluster file, driven over SSH."""

    def __init__(self, spec: NodeSpec, components: Mapping[str, ComponentSpec],
                 ssh: SshSessions, faults: FaultGuard):
        self.spec = spec
        self.components = dict(components)
        self._ssh = ssh
        self._faults = faults

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"Node({self.spec.describe()}, components={sorted(self.components)})"

    # ------------------------------------------------------------------ commands

    def _shell(self, flag: str) -> str:
        return ("sudo -n " if self.spec.sudo else "") + f"sh {flag}"

    def run(self, command: str, *, timeout: float | None = None, check: bool = True,
            stdin: str | None = None) -> RemoteResult:
        """Run a shell command line on the node with POSIX ``sh`` (as root with ``sudo``)."""
        return self._ssh.run(self.spec, f"{self._shell('-c')} {shlex.quote(command)}",
                             stdin=stdin, timeout=timeout, label=command, check=check)

    def script(self, body: str, what: str, *, timeout: float | None = None,
               ok: tuple[int, ...] = (0,), **params: object) -> RemoteResult:
        """Run one of ``scripts``' bodies with ``MC_*`` parameters; an exit status outside
        ``ok`` raises ``CommandFailed`` labelled ``what``."""
        result = self._ssh.run(self.spec, self._shell("-s"), stdin=scripts.script(body, **params),
                               timeout=timeout, label=what, check=False)
        if result.exit_status not in ok:
            raise CommandFailed(self.name, what, result.exit_status, result.stdout, result.stderr)
        return result

    # ------------------------------------------------------------------ components

    def component(self, name: str) -> ComponentSpec:
        try:
            return self.components[name]
        except KeyError:
            raise ComponentError(self.name, (
                f"has no component {name!r} (on this node: "
                f"{', '.join(sorted(self.components)) or 'none'})")) from None

    def _params(self, c: ComponentSpec, wait: float = 10.0) -> dict[str, object]:
        return {"pidfile": c.pid_path(self.spec) or "", "match": c.match or "",
                "unit": c.unit or "", "log": c.log_path(self.spec) or "",
                "own_pidfile": int(c.start is not None and c.pid_file is None),
                "wait": max(1, math.ceil(wait))}

    def _find(self, name: str) -> list[tuple[int, str]]:
        """(pid, /proc state letter) of each live process of the component."""
        c = self.component(name)
        r = self.script(scripts.FIND, f"find {name}", ok=(0, 3), **self._params(c))
        if r.exit_status == 3:
            return []
        found = [line.split() for line in r.stdout.splitlines() if line.strip()]
        return [(int(f[0]), f[1] if len(f) > 1 else "?") for f in found]

    def pids(self, name: str) -> list[int]:
        """Live processes of the component (pid file, unit, or command-line match)."""
        return [pid for pid, _ in self._find(name)]

    def state(self, name: str) -> str:
        """``running``, ``paused`` (every process stopped by SIGSTOP) or ``absent``."""
        states = [state for _, state in self._find(name)]
        if not states:
            return "absent"
        return "paused" if all(s in ("T", "t") for s in states) else "running"

    def start(self, name: str, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> list[int]:
        """Start the component and wait until it is ready (its ``ready_log`` text appears in
        new log output, its ``ready_tcp`` port accepts); returns its pids. ``env`` overrides
        the component's own environment for this start (a ``start`` command line only).
        Raises ``ComponentError`` if it is already running, exits while starting, is not
        ready before ``timeout`` (default: the component's start_timeout), or is an
        operator's process the file gives no way to start."""
        c = self.component(name)
        self._faults.require("restart", c.kind, f"start {name} on {self.name}")
        return self._start(c, timeout, env)

    def _start(self, c: ComponentSpec, timeout: float | None,
               env: Mapping[str, str] | None = None) -> list[int]:
        name = c.name
        if not c.startable:
            raise ComponentError(self.name, (
                f"{name} has neither `start` nor `unit` in the cluster file (an operator's "
                f"process: found, signalled and killed, never started by the run)"))
        if env and c.start is None:
            raise ComponentError(self.name, f"{name} is a systemd unit: its environment is the "
                                            f"unit's, a start cannot set {sorted(env)}")
        wait = c.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        params = self._params(c, wait)
        if c.start is not None:
            body = scripts.START_COMMAND + scripts.WAIT_READY
            params.update(command=scripts.env_exports({**c.env, **(env or {})}) + c.start,
                          cwd=c.cwd or "")
        else:
            body = scripts.START_UNIT + scripts.WAIT_READY
        r = self.script(body, f"start {name}", ok=(0, 4, 5, 6), timeout=wait + _SSH_SLACK,
                        ready=c.ready_log or "", **params)
        if r.exit_status == 4:
            raise ComponentError(self.name, f"{name} is {r.stdout.strip()} (stop it first)")
        if r.exit_status in (5, 6):
            why = ("exited while starting" if r.exit_status == 5
                   else f"printed no {c.ready_log!r} within {wait:g}s")
            raise ComponentError(self.name, f"{name} {why}; last log lines:\n"
                                            f"{self._tail(c, 20)}")
        if c.ready_tcp:
            self._wait_tcp(c, deadline)
        self._faults.came_back(self.name, name)
        return [int(p) for p in r.stdout.split()[1:]]

    def _wait_tcp(self, c: ComponentSpec, deadline: float) -> None:
        host, _, port = c.ready_tcp.rpartition(":")  # type: ignore[union-attr]
        last = ""
        while True:
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                    return
            except OSError as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise ComponentError(self.name, (
                    f"{c.name} runs but {c.ready_tcp} accepted no connection before the deadline "
                    f"({last}); last log lines:\n{self._tail(c, 20)}"))
            time.sleep(0.05)

    def stop(self, name: str, timeout: float | None = None, fault: bool = True) -> str:
        """SIGTERM (and SIGCONT, so a paused process sees it), SIGKILL after ``timeout``
        (default: the component's stop_timeout). Returns ``term``, ``kill`` or ``not running``.
        ``fault=False``: the component is being put back to the state it should have (a
        component a test started, stopped when it ends), so nothing goes to the ledger."""
        c = self.component(name)
        self._faults.require("restart", c.kind, f"stop {name} on {self.name}")
        wait = c.stop_timeout if timeout is None else timeout
        with self._recording(fault, "down", name, "stop") as rec:
            body = scripts.STOP_COMMAND if c.unit is None else scripts.STOP_UNIT
            r = self.script(body, f"stop {name}", ok=(0, 3), timeout=wait + 5 + _SSH_SLACK,
                            **self._params(c, wait))
            if r.exit_status == 3 and c.unit is None:
                rec.noop = "it was not running"
        return "not running" if r.exit_status == 3 else r.stdout.split()[0]

    def kill(self, name: str, fault: bool = True) -> list[int]:
        """SIGKILL the component (its process group); returns the pids killed ([] if none).
        ``fault=False`` as for ``stop``."""
        c = self.component(name)
        self._faults.require("kill", c.kind, f"kill -9 {name} on {self.name}")
        with self._recording(fault, "down", name, "kill") as rec:
            r = self.script(scripts.KILL, f"kill -9 {name}", ok=(0, 3), timeout=5 + _SSH_SLACK,
                            **self._params(c, 5))
            if r.exit_status == 3:
                rec.noop = "it was not running"
        return [] if r.exit_status == 3 else [int(p) for p in r.stdout.split()[1:]]

    def _recording(self, fault: bool, kind: str, name: str,
                   how: str) -> AbstractContextManager[Any]:
        if fault:
            return self._faults.recording(kind, node=self.name, component=name, how=how)
        return nullcontext(_Unrecorded())

    def restart(self, name: str, graceful: bool = True, timeout: float | None = None) -> list[int]:
        """Stop (or kill -9 when not ``graceful``) then start; returns the new pids."""
        if graceful:
            self.stop(name)
        else:
            self.kill(name)
        return self.start(name, timeout)

    def pause(self, name: str) -> list[int]:
        """SIGSTOP the component; recorded so a teardown or heal sends SIGCONT."""
        c = self.component(name)
        self._faults.require("pause", c.kind, f"pause {name} on {self.name}")
        with self._faults.recording("pause", node=self.name, component=name) as rec:
            r = self.script(scripts.PAUSE, f"pause {name}", ok=(0, 3), timeout=5 + _SSH_SLACK,
                            **self._params(c, 5))
            if r.exit_status == 3:
                rec.noop = "it was not running"
        if r.exit_status == 3:
            raise ComponentError(self.name, f"cannot pause {name}: it is not running")
        return [int(p) for p in r.stdout.split()[1:]]

    def resume(self, name: str) -> list[int]:
        """SIGCONT the component's processes."""
        c = self.component(name)
        self._faults.require("pause", c.kind, f"resume {name} on {self.name}")
        pids = self._resume(c)
        self._faults.came_back(self.name, name, kinds=("pause",))
        return pids

    def _resume(self, c: ComponentSpec) -> list[int]:
        r = self.script(scripts.RESUME, f"resume {c.name}", ok=(0, 3), timeout=5 + _SSH_SLACK,
                        **self._params(c, 5))
        return [] if r.exit_status == 3 else [int(p) for p in r.stdout.split()[1:]]

    def sockets(self, name: str) -> list[proc_sockets.Socket]:
        """The component's TCP sockets from ``/proc`` on its node (listening and connected);
        [] when it is not running."""
        c = self.component(name)
        r = self.script(scripts.SOCKETS, f"read the sockets of {name}", ok=(0, 3),
                        **self._params(c))
        return [] if r.exit_status == 3 else proc_sockets.parse(r.stdout)

    def logs(self, name: str, lines: int = 200) -> str:
        """The last ``lines`` lines of the component's log (its file, else journalctl)."""
        c = self.component(name)
        self._faults.require("logs", c.kind, f"read the log of {name} on {self.name}")
        return self._tail(c, lines, strict=True)

    def _tail(self, c: ComponentSpec, lines: int, strict: bool = False) -> str:
        try:
            r = self.script(scripts.LOGS, f"read the log of {c.name}", lines=int(lines),
                            **self._params(c))
        except CommandFailed as exc:
            if strict:
                raise
            return f"(log unavailable: {exc})"
        return r.stdout

    # ------------------------------------------------------------------ used by heal

    def ensure_running(self, name: str) -> str:
        """Start the component unless it runs (heal of a ``down`` fault); says which."""
        c = self.component(name)
        if self.pids(name):
            return "already running"
        self._resume(c)
        self._start(c, None)
        return "started"

    def ensure_resumed(self, name: str) -> str:
        return f"resumed {self._resume(self.component(name))}"


