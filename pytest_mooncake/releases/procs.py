"""Short-lived processes of a probe (a master, two engines, a scratch etcd): each in its own
process group, told to die with its parent, always stopped by the ``running`` context.

The parent-death signal is set by the exec wrapper every child of the plugin starts through
(``runtime/die_with_parent``: ``prctl`` then ``exec``), not by ``preexec_fn``, which is unsafe
in a multithreaded parent. Probes are short, one at a time, and need their stdin/stdout; the supervisor of long-running test processes is
``runtime.processes``. Waits are the runtime's one wait loop; ports come from ``runtime.ports``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pytest_mooncake.runtime import deadlines
from pytest_mooncake.runtime.die_with_parent import wrap

T = TypeVar("T")


def spawn(argv: Sequence[str], env: Mapping[str, str], log: Path, **kw: Any) -> subprocess.Popen:
    """Start ``argv`` in a new session, stdout+stderr to ``log`` (unless given otherwise)."""
    out = kw.pop("stdout", None)
    log.parent.mkdir(parents=True, exist_ok=True)
    log_fh = open(log, "ab")  # noqa: SIM115 (the child holds it; closed below)
    try:
        return subprocess.Popen(
            wrap(argv, env), env=dict(env), stdout=out if out is not None else log_fh,
            stderr=log_fh,
            start_new_session=True, **kw)
    finally:
        log_fh.close()


def stop(proc: subprocess.Popen, grace: float = 3.0) -> int | None:
    """SIGTERM the process group, SIGKILL it after ``grace`` s; reap. Returns the exit code.
    Only the first call signals: once the group is gone its id may belong to someone else."""
    if getattr(proc, "_mc_stopped", False):
        return proc.poll()
    proc._mc_stopped = True  # type: ignore[attr-defined]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # grandchildren of a leader that already exited
    for stream in (proc.stdin, proc.stdout):
        if stream:
            with contextlib.suppress(OSError):
                stream.close()
    return proc.poll()


@contextlib.contextmanager
def running(argv: Sequence[str], env: Mapping[str, str], log: Path, **kw: Any
            ) -> Iterator[subprocess.Popen]:
    proc = spawn(argv, env, log, **kw)
    try:
        yield proc
    finally:
        stop(proc)


def wait_until(check: Callable[[], T], timeout: float, what: str,
               proc: subprocess.Popen | None = None, log: Path | None = None) -> T:
    """``runtime.deadlines.wait_until`` for a probe's process: ``check`` until truthy; a
    ``Timeout`` naming ``what`` with the log's tail, or RuntimeError when ``proc`` exits first."""

    def probe() -> T:
        got = check()
        if not got and proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode} first"
                               f"{log_tail(log)}")
        return got

    try:
        return deadlines.wait_until(probe, timeout, what, interval=0.02)
    except deadlines.Timeout as exc:
        raise deadlines.Timeout(f"{exc}{log_tail(log)}") from None


def log_tail(log: Path | None, lines: int = 8) -> str:
    if log is None:
        return ""
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return "; log tail: " + " | ".join(tail) if tail else ""
