"""Which metadata and HA backends a Mooncake build accepts, asked of the build itself.

A backend is judged only where the build takes it, and the answer comes from running the build
in this session, not from a list typed in: ``engine_accepts`` initialises a ``TransferEngine``
of the build on the given metadata URI (the session Redis for ``redis://``), and
``master_accepts`` starts the build's ``mooncake_master`` with ``--enable_ha`` on the given
``--ha_backend_type``/``--ha_backend_connstring``. Either one answers with what the build said:
accepted, or refused with its own words (the PyPI wheels of 0.3.13.post1 and 0.3.14, for
instance, abort on ``redis://`` with "Unable to find metadata storage plugin redis" and refuse
``--ha_backend_type=redis`` with "Failed to parse HA backend config: UNAVAILABLE_IN_CURRENT_MODE":
they are built without Redis). Answers are kept per build, URI scheme and backend for the
session.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import Supervisor, log_matches

ENGINE_PROBE = """
import sys
from mooncake.engine import TransferEngine
engine = TransferEngine()
rc = engine.initialize(sys.argv[1], sys.argv[2], "tcp", "")
print("PROBE-RC", rc, flush=True)
sys.exit(0 if rc == 0 else 3)
"""
"""Run by the build's Python: initialise one engine on the URI, print what initialize returned."""

PROBE_TIMEOUT = 60.0
MASTER_SETTLE = 8.0
"""How long a master on an HA backend must stay up (and hold leadership) to count as accepting
it; one that refuses the backend exits within a second of starting."""

REFUSAL = re.compile(r"^[EF]\d{4} .*$|^.*(Unable to|Failed to|unavailable|not supported).*$",
                     re.MULTILINE | re.IGNORECASE)
_LOCK = threading.Lock()
_ANSWERS: dict[tuple[str, str, str], BackendAnswer] = {}


@dataclass(frozen=True)
class BackendAnswer:
    """What a build answered when asked to run on a backend."""

    accepted: bool
    answer: str
    """The build's own words: its refusal (log lines), or what showed it accepted."""


def _refusal(log: str, fallback: str) -> str:
    lines = [m.group(0).strip() for m in REFUSAL.finditer(log)]
    return "; ".join(dict.fromkeys(lines)) or fallback


def _cached(key: tuple[str, str, str], ask: Any) -> BackendAnswer:
    with _LOCK:
        if key in _ANSWERS:
            return _ANSWERS[key]
    answer = ask()
    with _LOCK:
        return _ANSWERS.setdefault(key, answer)


def engine_accepts(install: Any, uri: str, workdir: Path) -> BackendAnswer:
    """Whether a ``TransferEngine`` of ``install`` initialises on metadata ``uri``."""
    scheme = (uri.partition("://")[0] if "://" in uri
              else "p2p" if uri == "P2PHANDSHAKE" else "etcd")
    return _cached((install.spec, "engine", scheme),
                   lambda: _ask_engine(install, uri, Path(workdir)))


def _ask_engine(install: Any, uri: str, workdir: Path) -> BackendAnswer:
    supervisor = Supervisor(workdir / "backend-probes", name="backend-probe")
    port = free_port()
    try:
        proc = supervisor.start(
            f"engine-probe-{uri.partition('://')[0]}",
            [install.python, "-c", ENGINE_PROBE, f"127.0.0.1:{port}", uri],
            env=install.env({"MC_TCP_BIND_ADDRESS": "127.0.0.1"}),
            ready=None)
        code = proc.wait_exit(PROBE_TIMEOUT)
        log = proc.log_text()
        if code is None:
            return BackendAnswer(False, f"TransferEngine.initialize(..., {uri!r}) of "
                                        f"{install.version} did not return within "
                                        f"{PROBE_TIMEOUT:g}s")
        if code == 0:
            return BackendAnswer(True, f"TransferEngine.initialize(..., {uri!r}) of "
                                       f"{install.version} returned 0")
        said = _refusal(log, log.strip().splitlines()[-1] if log.strip() else "no output")
        return BackendAnswer(False, f"TransferEngine.initialize(..., {uri!r}) of "
                                    f"{install.version} failed (exit status {code}): {said}")
    finally:
        supervisor.stop_all()
        release_port(port)


def master_accepts(install: Any, backend: str, connstring: str, workdir: Path,
                   extra_args: tuple[str, ...] = ()) -> BackendAnswer:
    """Whether ``install``'s ``mooncake_master`` runs with ``--enable_ha`` on ``backend``."""
    return _cached((install.spec, "master", backend),
                   lambda: _ask_master(install, backend, connstring, Path(workdir), extra_args))


def _ask_master(install: Any, backend: str, connstring: str, workdir: Path,
                extra_args: tuple[str, ...]) -> BackendAnswer:
    master = install.build.master_binary
    if master is None:
        return BackendAnswer(False, f"{install.version} ships no mooncake_master binary")
    supervisor = Supervisor(workdir / "backend-probes", name="backend-probe")
    ports = [free_port() for _ in range(3)]
    flags = ["--enable_ha=true", f"--ha_backend_type={backend}",
             f"--ha_backend_connstring={connstring}", f"--rpc_port={ports[0]}",
             "--rpc_address=127.0.0.1", f"--http_metadata_server_port={ports[1]}",
             f"--metrics_port={ports[2]}", *extra_args]
    said = f"mooncake_master {' '.join(flags[:3])} of {install.version}"
    try:
        proc = supervisor.start(f"master-probe-{backend}", [str(master), *flags],
                                env=install.env(), cwd=str(workdir), ready=None)
        try:
            wait_until(lambda: not proc.alive(), MASTER_SETTLE,
                       f"{said} to exit (a refusal)", interval=0.1)
        except Timeout:
            started = log_matches(r"(?i)leader|elected|master service started")(proc)
            return BackendAnswer(True, f"{said} kept running for {MASTER_SETTLE:g}s"
                                       + (" and logged its start" if started else ""))
        log = proc.log_text()
        return BackendAnswer(False, f"{said} exited with {proc.returncode}: "
                                    f"{_refusal(log, 'no reason logged')}")
    finally:
        supervisor.stop_all()
        for port in ports:
            release_port(port)


def forget_answers() -> None:
    """Drop the answers kept (tests of the probes)."""
    with _LOCK:
        _ANSWERS.clear()


__all__ = ["BackendAnswer", "engine_accepts", "master_accepts", "forget_answers"]

