"""A process supervisor: start, probe, stop, kill and restart real child processes.

Every child runs in its own process group (so a wrapper and what it spawns die together) and
gets ``PR_SET_PDEATHSIG`` so it dies with the test process even on ``kill -9``. Output goes to a
per-process log file. Every process started through a ``Supervisor`` is registered; the plugin
reaps whatever is still alive at session end and reports it as an error (a teardown leak).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import re
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.loopback_http import http_request

ReadyProbe = Callable[["ManagedProcess"], bool]

_LIBC = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None
_PR_SET_PDEATHSIG = 1
_LIVE: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class ProcessStartError(RuntimeError):
    """A child exited or never became ready before its deadline."""


def _child_setup() -> None:
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Spawner:
    """Forks every child from one long-lived thread.

    Linux delivers PR_SET_PDEATHSIG when the *thread* that forked the child exits, not the
    process: a child started from a short-lived worker thread (a nemesis restarting an engine)
    would die with that thread. Forking from a thread that lives as long as the process makes
    the signal mean what we want: the child dies when the test process dies.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def popen(self, *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="mc-spawner")
            executor = self._executor
        return executor.submit(subprocess.Popen, *args, **kwargs).result()


_SPAWNER = _Spawner()


# ------------------------------------------------------------------------ readiness probes


def port_open(port: int, host: str = "127.0.0.1") -> ReadyProbe:
    def probe(_: ManagedProcess) -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            return False

    probe.__doc__ = f"TCP {host}:{port} accepts connections"
    return probe


def http_ok(url: str) -> ReadyProbe:
    def probe(_: ManagedProcess) -> bool:
        try:
            return 200 <= http_request("GET", url, timeout=0.5).status < 300
        except OSError:
            return False

    probe.__doc__ = f"GET {url} answers 2xx"
    return probe


def log_matches(pattern: str) -> ReadyProbe:
    regex = re.compile(pattern, re.MULTILINE)

    def probe(proc: ManagedProcess) -> bool:
        return bool(regex.search(proc.log_text()))

    probe.__doc__ = f"log matches /{pattern}/"
    return probe


# ------------------------------------------------------------------------ processes


class ManagedProcess:
    """One child process with its argv, environment and log, restartable with the same."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        ready: ReadyProbe | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 5.0,
    ):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # --------------------------------------------------------------- lifecycle

    def start(self) -> ManagedProcess:
        if self.alive():
            raise ProcessStartError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = _SPAWNER.popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.cwd, start_new_session=True, preexec_fn=_child_setup,
            )
        self.starts += 1
        with _LIVE_LOCK:
            _LIVE.add(self)
        if self.ready is not None:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll the readiness probe until it holds, the child exits, or the deadline passes."""
        assert self.ready is not None
        probe = self.ready

        def ready_or_exited() -> bool:
            if probe(self):
                return True
            if not self.alive():
                raise ProcessStartError(
                    f"{self.name} exited with {self.returncode} before it was ready "
                    f"({probe.__doc__}); last log lines:\n{self.log_tail()}"
                )
            return False

        try:
            wait_until(ready_or_exited, self.ready_timeout if timeout is None else timeout,
                       f"{self.name} to be ready", interval=0.005, max_interval=0.1)
        except Timeout:
            self.kill()
            raise ProcessStartError(
                f"{self.name} was not ready ({probe.__doc__}) within "
                f"{self.ready_timeout:.0f}s; killed it. Last log lines:\n{self.log_tail()}"
            ) from None

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the child to exit; its return code or None."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group."""
        if self.popen is not None and self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait, then SIGKILL; always reaps. Returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.send_signal(signal.SIGTERM)
            if self.wait_exit(self.stop_timeout if timeout is None else timeout) is None:
                self.kill()
        return self._reap()

    stop = terminate

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        """Kill the process group with ``sig`` (default SIGKILL) and reap the child."""
        self.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            return self._reap()
        return None

    def restart(self) -> ManagedProcess:
        """Stop (gracefully) and start again with the same argv, env and log file."""
        self.terminate()
        return self.start()

    def _reap(self) -> int | None:
        if self.popen is None:
            return None
        try:
            code = self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            code = self.popen.wait(timeout=10)
        # The group may hold grandchildren that outlived the leader.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return code

    # --------------------------------------------------------------- state

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "alive" if self.alive() else f"exited {self.returncode}"
        return f"<ManagedProcess {self.name} pid={self.pid} {state}>"


class Supervisor:
    """Owns a set of processes; ``stop_all`` reaps every one of them."""

    def __init__(self, log_dir: Path, name: str = "supervisor"):
        self.log_dir = Path(log_dir)
        self.name = name
        self.processes: list[ManagedProcess] = []

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        ready: ReadyProbe | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 5.0,
        cwd: str | Path | None = None,
        log_path: Path | None = None,
    ) -> ManagedProcess:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        proc = ManagedProcess(
            name, argv, log_path or self.log_dir / f"{safe}.log", env=env, cwd=cwd,
            ready=ready, ready_timeout=ready_timeout, stop_timeout=stop_timeout,
        )
        self.processes.append(proc)
        try:
            proc.start()
        except BaseException:
            proc.kill()
            raise
        return proc

    def stop_all(self) -> list[str]:
        """Stop every process (SIGTERM, then SIGKILL); returns a line per process that had to
        be killed the hard way."""
        notes = []
        for proc in reversed(self.processes):
            if proc.alive():
                proc.terminate()
                if proc.returncode is not None and proc.returncode < 0 and \
                        proc.returncode == -signal.SIGKILL:
                    notes.append(f"{proc.name} ignored SIGTERM and was killed")
        return notes


def live_processes() -> list[ManagedProcess]:
    """Processes started through any supervisor and not yet reaped."""
    with _LIVE_LOCK:
        return [p for p in list(_LIVE) if p.alive()]


def reap_all() -> list[ManagedProcess]:
    """Kill and reap every live process; returns those that were still alive."""
    leaked = live_processes()
    for proc in leaked:
        proc.kill()
    return leaked
