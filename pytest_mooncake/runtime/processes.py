"""A process supervisor: start, probe, stop, kill and restart real child processes.

Every child runs in its own process group (so a wrapper and what it spawns die together) and
starts through an exec wrapper that sets ``PR_SET_PDEATHSIG`` (``die_with_parent``), so it dies
with the test process even on ``kill -9``. Output goes to a per-process log file. Every process
started through a ``Supervisor`` is registered until it is reaped; the plugin reaps whatever is
left at session end and reports what was still running as an error (a teardown leak).

A child is reaped only after its group was killed: until then its pid, which is also its
group's id, cannot be given to another process, so ``killpg`` never reaches a stranger's group.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.die_with_parent import wrap
from pytest_mooncake.runtime.fork_server import ForkServerError
from pytest_mooncake.runtime.loopback_http import http_request

ReadyProbe = Callable[["ManagedProcess"], bool]

_LIVE: set[ManagedProcess] = set()
"""Started and not yet reaped (held strongly: a forgotten process is still ours to kill)."""
_LIVE_LOCK = threading.Lock()
SPAWN_TIMEOUT = 60.0
"""How long starting a child may take before the spawner thread counts as stuck."""
KILL_TIMEOUT = 10.0
"""How long a SIGKILLed child may take to exit before it counts as stuck in the kernel."""


class ProcessStartError(RuntimeError):
    """A child exited or never became ready before its deadline."""


class ProcessExitedEarly(ProcessStartError):
    """A child exited before it was ready (told apart from a deadline by what happened, not
    by the clock: on a loaded machine an early exit can be noticed after the deadline)."""


class ProcessStopError(RuntimeError):
    """A child did not exit after SIGKILL (stuck in the kernel); the message names it."""


def _kill_late_child(future: concurrent.futures.Future[subprocess.Popen[bytes]]) -> None:
    """A child whose start outlived the caller's deadline: nobody owns it, so it goes."""
    if future.cancelled() or future.exception() is not None:
        return
    popen = future.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)  # not reaped yet: the group id is still its own
    popen.wait()


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

    def popen(self, argv: Sequence[str], timeout: float = SPAWN_TIMEOUT, **kwargs: object
              ) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="mc-spawner")
            executor = self._executor
        future = executor.submit(subprocess.Popen, argv, **kwargs)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.add_done_callback(_kill_late_child)
            raise ProcessStartError(
                f"starting {' '.join(argv)[:200]} did not return within {timeout:g} s (the "
                f"spawner thread is busy or stuck; a child that starts later is killed)"
            ) from None


_SPAWNER = _Spawner()
spawn_popen = _SPAWNER.popen
"""``subprocess.Popen`` from the long-lived spawner thread (see ``_Spawner``)."""

_FORK_SERVERS: Any = None
"""A ``fork_server.ForkServers`` whose servers fork the Python children they accept (the
plugin's ``--mc-fork-server``), or None: every child is exec'd."""


def use_fork_servers(servers: Any) -> Any:
    """Fork accepted children from ``servers`` from now on (None: exec every child); returns
    the servers used before."""
    global _FORK_SERVERS
    before, _FORK_SERVERS = _FORK_SERVERS, servers
    return before


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


def exit_status(popen: subprocess.Popen[bytes]) -> int | None:
    """The exit status of ``popen``'s child once it exited, without reaping it (a zombie keeps
    its pid, and so its group id, its own); None while it runs."""
    if popen.returncode is not None:
        return popen.returncode
    nowait = getattr(popen, "status_nowait", None)
    if nowait is not None:  # a ForkedChild: its fork server keeps the zombie
        return nowait()
    try:
        info = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped behind our back (a Popen.wait elsewhere)
        return popen.poll()
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -info.si_status
    return info.si_status


def wait_exit(popen: subprocess.Popen[bytes], timeout: float, what: str = "the child"
              ) -> int | None:
    """Wait up to ``timeout`` seconds for the child to exit, without reaping it; its exit
    status, or None."""
    try:
        wait_until(lambda: exit_status(popen) is not None, timeout, f"{what} to exit",
                   interval=0.002, max_interval=0.05)
    except Timeout:
        return None
    return exit_status(popen)


def signal_group(popen: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the child's process group, unless the child is reaped: only while the
    leader (alive or a zombie) holds its pid can the group id name no one else's group."""
    if popen.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, sig)


def stop_group(popen: subprocess.Popen[bytes], grace: float, kill_timeout: float = KILL_TIMEOUT,
               what: str = "the child") -> int:
    """SIGTERM the group, SIGKILL it after ``grace`` s, kill what is left of it once the leader
    exited (its descendants), then reap the leader; its exit status. ``ProcessStopError`` if
    the leader outlives SIGKILL by ``kill_timeout`` s (the rest of the group is killed)."""
    if popen.returncode is not None:
        return popen.returncode
    try:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_timeout)):
            if exit_status(popen) is not None:
                break
            signal_group(popen, sig)
            wait_exit(popen, wait, what)
        if exit_status(popen) is None:
            raise ProcessStopError(
                f"{what} (pid {popen.pid}) is still there {kill_timeout:g} s after SIGKILL "
                f"({_proc_state(popen.pid)}): stuck in the kernel")
    finally:
        signal_group(popen, signal.SIGKILL)
    if popen.returncode is None:  # the leader still holds the group id: wait for the rest
        try:
            wait_until(lambda: process_group(popen.pid) == [], kill_timeout,
                       f"the rest of {what}'s process group to exit after SIGKILL",
                       interval=0.002, max_interval=0.05)
        except Timeout:
            pass  # stuck in the kernel: session end finds it and reports it
    return popen.wait()


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
        self.kill_timeout = KILL_TIMEOUT
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # --------------------------------------------------------------- lifecycle

    def start(self) -> ManagedProcess:
        if self.popen is not None and not self.reaped():
            if self.alive():
                raise ProcessStartError(f"{self.name} is already running (pid {self.pid})")
            self._reap(0.0)  # exited on its own: what is left of its group goes first
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        server = (_FORK_SERVERS.for_child(self.argv, self.env)
                  if _FORK_SERVERS is not None else None)
        with open(self.log_path, "ab") as log:
            log.write(f"--- start #{self.starts + 1}: {' '.join(self.argv)}"
                      f"{' (forked)' if server is not None else ''}\n".encode())
            log.flush()
            self.popen = None
            if server is not None:
                try:
                    self.popen = server.spawn(self.argv, self.env, self.cwd, self.log_path)
                except ForkServerError as exc:
                    log.write(f"--- not forked ({exc}): started as a new interpreter\n".encode())
                    log.flush()
            if self.popen is None:
                self.popen = _SPAWNER.popen(
                    wrap(self.argv, self.env), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd, start_new_session=True,
                )
        self.starts += 1
        with _LIVE_LOCK:
            _LIVE.add(self)
        if self.ready is not None:
            try:
                self.wait_ready()
            except BaseException:
                self.kill()
                raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll the readiness probe until it holds, the child exits, or the deadline passes."""
        assert self.ready is not None
        probe = self.ready

        def exited_early() -> ProcessExitedEarly:
            return ProcessExitedEarly(
                f"{self.name} exited with {self.returncode} before it was ready "
                f"({probe.__doc__}); last log lines:\n{self.log_tail()}")

        def ready_or_exited() -> bool:
            if probe(self):
                return True
            if not self.alive():
                raise exited_early()
            return False

        try:
            wait_until(ready_or_exited, self.ready_timeout if timeout is None else timeout,
                       f"{self.name} to be ready", interval=0.005, max_interval=0.025)
        except Timeout:
            if not self.alive():
                raise exited_early() from None
            self.kill()
            raise ProcessStartError(
                f"{self.name} was not ready ({probe.__doc__}) within "
                f"{self.ready_timeout:.0f}s; killed it. Last log lines:\n{self.log_tail()}"
            ) from None

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the child to exit; its return code or None.
        The child is not reaped here (see the module's docstring)."""
        if self.popen is None:
            return None
        return wait_exit(self.popen, timeout, self.name)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group (nothing once it is reaped)."""
        if self.popen is not None:
            signal_group(self.popen, sig)

    def terminate(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait, then SIGKILL; kills what is left of the group and reaps. Returns
        the exit code; ``ProcessStopError`` if the child outlives SIGKILL (it stays
        registered, and the session end reports it)."""
        return self._reap(self.stop_timeout if timeout is None else timeout)

    stop = terminate

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        """Send ``sig`` (default SIGKILL) to the process group; for SIGKILL and SIGTERM also
        wait for the exit and reap (``ProcessStopError`` if the child outlives SIGKILL)."""
        self.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            return self._reap(self.kill_timeout if sig == signal.SIGTERM else 0.0)
        return None

    def restart(self) -> ManagedProcess:
        """Stop (gracefully) and start again with the same argv, env and log file."""
        self.terminate()
        return self.start()

    def _reap(self, grace: float) -> int | None:
        if self.popen is None:
            return None
        code = stop_group(self.popen, grace, self.kill_timeout, self.name)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return code

    # --------------------------------------------------------------- state

    def _exit_status(self) -> int | None:
        return exit_status(self.popen) if self.popen is not None else None

    def reaped(self) -> bool:
        return self.popen is not None and self.popen.returncode is not None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def returncode(self) -> int | None:
        return self._exit_status()

    def alive(self) -> bool:
        return self.popen is not None and self._exit_status() is None

    def group_members(self) -> list[int]:
        """Pids of the processes in this child's group other than the leader (its
        descendants that outlived it, or outlive it); empty once reaped."""
        if self.popen is None or self.reaped():
            return []
        return [pid for pid in process_group(self.popen.pid) if pid != self.popen.pid]

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


def _stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _proc_state(pid: int | None) -> str:
    fields = _stat_fields(pid) if pid else None
    return f"state {fields[0]}" if fields else "no /proc entry"


def process_group(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and fields[2] == str(pgid) and fields[0] != "Z":
                members.append(int(entry))
    return members


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
        """Stop every process (SIGTERM, then SIGKILL), also those whose leader already exited
        (their group may hold its descendants); returns a line per process that had to be
        killed the hard way. Every process is stopped even if one cannot be: that one is
        raised as ``ProcessStopError`` afterwards."""
        notes = []
        stuck: list[ProcessStopError] = []
        for proc in reversed(self.processes):
            if proc.popen is None or proc.reaped():
                continue
            was_running = proc.alive()
            try:
                code = proc.terminate()
            except ProcessStopError as exc:
                stuck.append(exc)
                continue
            if was_running and code == -signal.SIGKILL:
                notes.append(f"{proc.name} ignored SIGTERM and was killed")
        if stuck:
            raise ProcessStopError("; ".join(str(e) for e in stuck))
        return notes


def live_processes() -> list[ManagedProcess]:
    """Processes started through any supervisor and not yet reaped (running, or exited with
    their group not yet killed)."""
    with _LIVE_LOCK:
        return list(_LIVE)


def reap_all() -> list[ManagedProcess]:
    """Kill and reap every registered process; returns those that were still running (the
    leader or anything left in its group). Never raises: a process stuck in the kernel stays
    registered."""
    leaked = []
    for proc in live_processes():
        if proc.alive() or proc.group_members():
            leaked.append(proc)
        with contextlib.suppress(ProcessStopError):
            proc.kill()
    return leaked
