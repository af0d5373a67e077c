"""Python children forked from a process that already imported what they run.

The reference engine's suites start about 300 short-lived Python processes per run (engines,
masters, store clients); each paid an interpreter start and its imports, 0.2-0.4 s of CPU, more
than half of the run's child CPU on two cores (docs/speed.md). A ``ForkServer`` is one process
per test process that imports the given modules once, then forks a child per ``python -m
MODULE ...`` it is asked for (``fork_server_main.py``): the child is the same real process a
fresh interpreter would be (its own session, its log, its environment and directory, SIGKILLed
when the server dies, which dies with the test process), minus the start-up.

A ``ForkedChild`` is not this process's child, so it offers the part of ``subprocess.Popen``
the supervisor uses (``pid``, ``returncode``, ``poll``, ``wait``) plus ``status_nowait``: the
server keeps an exited child a zombie until it is reaped, so its pid (and its group's id) is
never reused while ``killpg`` may still name it, as with a real child (processes.py).

Only ``python -m MODULE`` argv of the server's own interpreter whose MODULE it imported are
forked, and only where the interpreter would start the same: every ``PYTHON*`` variable of the
child's environment equal to the server's (a server per distinct set). Anything else starts as
before. A server that finds threads after its imports refuses to fork (forking a threaded
process can leave a lock held for ever); its requests then start as before too.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.die_with_parent import wrap

Popen = Callable[..., "subprocess.Popen[bytes]"]
"""How a server is started: ``processes.spawn_popen`` (the spawner thread's, so PR_SET_PDEATHSIG
means "when this process dies")."""
READY_TIMEOUT = 60.0
"""How long the server may take to import its modules and say it is ready."""
REQUEST_TIMEOUT = 30.0


class ForkServerError(RuntimeError):
    """The server cannot fork this child (it is gone, or refused); the message says why."""


def _runs_module_of(argv: Sequence[str], python: str, modules: Sequence[str]) -> bool:
    """Whether ``argv`` is ``python -m M ...`` with M the top package of one of ``modules``."""
    return (len(argv) >= 3 and argv[0] == python and argv[1] == "-m"
            and argv[2] in {m.split(".")[0] for m in modules})


def _python_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What decides how an interpreter starts (PYTHONPATH, PYTHONPYCACHEPREFIX, ...)."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON")))


class ForkedChild:
    """A process the fork server forked, as the supervisor sees a ``subprocess.Popen``."""

    def __init__(self, server: ForkServer, pid: int, args: Sequence[str]):
        self._server = server
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def status_nowait(self) -> int | None:
        """The exit status once it exited, without reaping; None while it runs."""
        if self.returncode is not None:
            return self.returncode
        try:
            reply = self._server.request({"op": "status", "pid": self.pid})
        except ForkServerError:
            return self._gone()
        return reply["status"] if reply.get("exited") else None

    def poll(self) -> int | None:
        if self.returncode is None and self.status_nowait() is not None:
            try:
                self.returncode = self._server.request({"op": "reap", "pid": self.pid})["status"]
            except ForkServerError:
                self._gone()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return self.returncode

    def _gone(self) -> int:
        """The server died: its children got SIGKILL (PR_SET_PDEATHSIG) and were reaped by
        init; what is known is that."""
        self.returncode = -9
        return self.returncode

    def __repr__(self) -> str:
        return f"<ForkedChild pid={self.pid} returncode={self.returncode}>"


class ForkServer:
    """One server process; ``spawn`` forks a child from it (thread-safe)."""

    def __init__(self, modules: Sequence[str], env: Mapping[str, str], popen: Popen,
                 python: str = sys.executable, ready_timeout: float = READY_TIMEOUT):
        self.modules = tuple(modules)
        self.python = python
        self.key = _python_env(env)
        self._lock = threading.Lock()
        mine, theirs = socket.socketpair()
        argv = [python, "-m", "pytest_mooncake.runtime.fork_server_main", str(theirs.fileno()),
                *self.modules]
        # through die_with_parent, and with ``popen`` the supervisor's spawner thread's: the
        # server dies with this process, and its children with it
        try:
            self._proc = popen(wrap(argv, env), env=dict(env), pass_fds=(theirs.fileno(),),
                               stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        self._sock = mine
        self._sock.settimeout(ready_timeout)
        self._in = mine.makefile("r", encoding="utf-8")
        self._out = mine.makefile("w", encoding="utf-8")
        try:
            line = self._in.readline()
        except OSError as exc:
            self.close()
            raise ForkServerError(f"the fork server did not start within {ready_timeout:g} s "
                                  f"({exc})") from None
        if not line:
            code = self._proc.wait(timeout=10)
            self.close()
            raise ForkServerError(f"the fork server exited ({code}) before it was ready: "
                                  f"importing {', '.join(self.modules)} failed (its output is "
                                  f"on this process's stderr)")
        hello = json.loads(line)
        self.threads = int(hello.get("threads", 0))
        self.pid = int(hello.get("pid", self._proc.pid))
        self._sock.settimeout(REQUEST_TIMEOUT)

    @property
    def safe(self) -> bool:
        """Whether it can fork: a single thread after its imports."""
        return self.threads == 1

    def accepts(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        return _runs_module_of(argv, self.python, self.modules) and _python_env(env) == self.key

    def request(self, doc: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                self._out.write(json.dumps(doc) + "\n")
                self._out.flush()
                line = self._in.readline()
            except (OSError, ValueError) as exc:
                raise ForkServerError(f"the fork server is gone ({exc})") from None
        if not line:
            raise ForkServerError("the fork server is gone (it hung up)")
        reply = json.loads(line)
        if "error" in reply:
            raise ForkServerError(f"the fork server refused {doc.get('op')}: {reply['error']}")
        return reply

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | Path | None,
              log_path: Path) -> ForkedChild:
        if not self.accepts(argv, env):
            raise ForkServerError(f"not a python -m of {', '.join(self.modules)} with this "
                                  f"server's interpreter settings: {' '.join(argv)[:200]}")
        reply = self.request({"op": "spawn", "module": argv[2], "argv0": argv[0],
                              "args": list(argv[3:]), "env": dict(env),
                              "cwd": None if cwd is None else str(cwd), "log": str(log_path)})
        return ForkedChild(self, int(reply["pid"]), argv)

    def close(self) -> None:
        """Hang up: the server exits, and any child still running gets SIGKILL."""
        for f in (getattr(self, "_out", None), getattr(self, "_in", None),
                  getattr(self, "_sock", None)):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class ForkServers:
    """The servers of this process, one per set of interpreter settings, made on first use;
    ``for_child`` says which serves a child (None: start it as before)."""

    def __init__(self, modules: Sequence[str], popen: Popen):
        self.modules = tuple(modules)
        self.popen = popen
        self._servers: dict[tuple, ForkServer | None] = {}
        self._lock = threading.Lock()
        self.refusals: list[str] = []

    def for_child(self, argv: Sequence[str], env: Mapping[str, str]) -> ForkServer | None:
        if not _runs_module_of(argv, sys.executable, self.modules):
            return None
        key = _python_env(env)
        with self._lock:
            if key not in self._servers:
                try:
                    server: ForkServer | None = ForkServer(self.modules, env, self.popen)
                    if not server.safe:
                        self.refusals.append(f"{server.threads} threads after importing "
                                             f"{', '.join(self.modules)}")
                        server.close()
                        server = None
                except ForkServerError as exc:
                    self.refusals.append(str(exc))
                    server = None
                self._servers[key] = server
            return self._servers[key]

    def close(self) -> None:
        with self._lock:
            servers = [s for s in self._servers.values() if s is not None]
            self._servers.clear()
        for s in servers:
            s.close()
