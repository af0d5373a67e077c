"""A real etcd for tests as a child process, or an existing cluster reached by address.

``EtcdServer`` starts ``etcd`` (Debian's ``etcd-server``) on two free loopback ports with a data
directory under the worker's temp dir, waits (bounded) for ``/health``, and stops and reaps it
when closed, removing its data directory (one a killed run left is removed by the next run:
``sweep_abandoned_data_dirs``). ``stop()``/``start()`` keep the data dir and
ports, for fault tests.
``ExternalEtcd`` is a cluster given by address (``--mc-etcd``): used, never stopped. The
``mc_etcd`` fixture (``fixtures/etcd_store.py``) chooses between them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.abandoned_dirs import OwnedDir, sweep_pytest_temp
from pytest_mooncake.runtime.loopback_http import http_request
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess
from pytest_mooncake.runtime.served_process import Readiness, ServedProcess

INSTALL_HINT = (
    "no etcd binary found on PATH: install it with `apt-get install -y etcd-server` "
    "(Debian/Ubuntu; the README's commands do this when run as root), set MC_ETCD_BIN to its "
    "path, or pass --mc-etcd=HOST:PORT of an etcd you run yourself"
)


class EtcdUnavailable(RuntimeError):
    """etcd could not be started or reached; the message says what to do."""


def etcd_healthy(endpoint: str, timeout: float = 0.5) -> bool:
    try:
        answer = http_request("GET", f"http://{endpoint}/health", timeout=timeout)
        return answer.status == 200 and json.loads(answer.body or b"{}").get("health") in (
            "true", True)
    except (OSError, ValueError, AttributeError):
        return False


FALLBACK_PATHS = ("/usr/bin/etcd", "/usr/local/bin/etcd")
READY_TIMEOUT_ENV = "MC_ETCD_READY_TIMEOUT"
DEFAULT_READY_TIMEOUT = 20.0


def ready_timeout_from_env() -> float:
    """Seconds to wait for a started etcd to report healthy (``MC_ETCD_READY_TIMEOUT``)."""
    raw = os.environ.get(READY_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_READY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise EtcdUnavailable(f"{READY_TIMEOUT_ENV} must be a positive number of seconds (got {raw!r})")
    return value


def find_etcd() -> str:
    explicit = os.environ.get("MC_ETCD_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EtcdUnavailable(f"MC_ETCD_BIN={explicit} is not an executable file; " + INSTALL_HINT)
        return explicit
    path = shutil.which("etcd") or next((p for p in FALLBACK_PATHS if os.access(p, os.X_OK)), None)
    if not path:
        raise EtcdUnavailable(INSTALL_HINT)
    return path


# gRPC shares one connection ("subchannel") per address among all channels of a process. After
# an etcd restart a new client could then inherit the old client's dead socket and fail its first
# call with "sendmsg: Broken pipe" (seen in CI under load). A local pool gives each client its own.
PRIVATE_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)


def etcd_client(endpoint: str, timeout: float = 5.0) -> Any:
    """An ``etcd3`` client on ``HOST:PORT`` with a connection of its own (see above)."""
    import etcd3  # noqa: PLC0415 (import-light plugin)

    host, _, port = endpoint.rpartition(":")
    return etcd3.client(host=host, port=int(port), timeout=timeout,
                        grpc_options=list(PRIVATE_CONNECTION))


class _EtcdClientMixin:
    endpoints: list[str]

    def client(self, timeout: float = 5.0) -> Any:
        """An ``etcd3`` client on the first endpoint."""
        return etcd_client(self.endpoints[0], timeout=timeout)

    @property
    def uri(self) -> str:
        """The metadata connection string as Mooncake spells it."""
        return "etcd://" + ";".join(self.endpoints)

    def healthy(self) -> bool:
        return any(etcd_healthy(e) for e in self.endpoints)


class EtcdServer(_EtcdClientMixin, ServedProcess):
    """A single-member etcd on loopback that we start, stop and restart ourselves."""

    unavailable = EtcdUnavailable

    def __init__(self, data_dir: Path, log_path: Path, binary: str | None = None,
                 ready_timeout: float | None = None):
        self.binary = binary or find_etcd()
        self.ready_timeout = ready_timeout if ready_timeout is not None else ready_timeout_from_env()
        self.data_dir = Path(data_dir)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.endpoints = [f"127.0.0.1:{self.client_port}"]
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.client_port}"
        name = f"mc-etcd-{self.client_port}"
        argv = [
            self.binary, "--name", name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{name}={peer}", "--initial-cluster-state", "new",
            "--log-level", "warn", "--logger", "zap",
        ]
        env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
        self.process = ManagedProcess(
            "etcd", argv, log_path, env=env, ready=lambda _: self.healthy(),
            ready_timeout=self.ready_timeout,
        )
        self.process.ready.__doc__ = f"GET http://{self.endpoints[0]}/health reports healthy"
        self._owned_data: OwnedDir | None = None

    def start(self) -> EtcdServer:
        if self._owned_data is None:
            self._owned_data = OwnedDir(self.data_dir)
        return super().start()

    def readiness(self) -> Readiness:
        return Readiness(
            server=f"etcd ({self.binary})", probe=f"GET http://{self.endpoints[0]}/health",
            ready="report healthy", became="reported healthy", state="healthy",
            log="the etcd log",
            fix=("set MC_ETCD_BIN to a working etcd (`apt-get install -y etcd-server`), or "
                 "pass --mc-etcd=HOST:PORT of an etcd you run yourself"),
            timeout_env=READY_TIMEOUT_ENV)

    def close(self) -> None:
        """Stop etcd for good: its ports are released and its data directory removed (etcd
        preallocates a 64 MB write-ahead log, so each one left behind costs that much disk)."""
        try:
            self.process.terminate()
        finally:
            release_port(self.client_port)
            release_port(self.peer_port)
            if not self.process.alive() and self._owned_data is not None:
                self._owned_data.release()
                self._owned_data = None


DATA_DIR_PATTERNS = ("pytest-*/etcd*/data", "pytest-*/popen-gw*/etcd*/data")
"""Where ``mc_etcd`` puts its data directory below pytest's temp root (serial, xdist)."""


def sweep_abandoned_data_dirs() -> list[Path]:
    """Remove etcd data directories of runs that were killed before they could (their owner
    lock is free); those removed."""
    return sweep_pytest_temp(DATA_DIR_PATTERNS)


class ExternalEtcd(_EtcdClientMixin):
    """An etcd cluster given with ``--mc-etcd``: used, never started or stopped."""

    owned = False

    def __init__(self, endpoints: list[str]):
        self.endpoints = list(endpoints)

    def check(self, timeout: float = 5.0) -> None:
        if not any(etcd_healthy(e, timeout=timeout) for e in self.endpoints):
            raise EtcdUnavailable(
                f"--mc-etcd={','.join(self.endpoints)}: no endpoint answers GET /health; check "
                f"the address and that etcd is running, or omit --mc-etcd to start one"
            )

    def stop(self) -> None:
        raise EtcdUnavailable("the --mc-etcd cluster is not ours to stop")

    start = kill = stop

    def close(self) -> None:
        pass

    def alive(self) -> bool:
        return self.healthy()

    def log_text(self) -> str:
        return f"(external etcd at {','.join(self.endpoints)}: no log)"
