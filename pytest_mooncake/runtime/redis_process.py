"""A real Redis for tests as a child process, or an existing one reached by address.

``RedisServer`` starts ``redis-server`` (Debian's ``redis-server``) on a free loopback port with
its working directory under the worker's temp dir and persistence off (nothing to recover: a
test that restarts it wants an empty store, like a Redis without a volume), waits (bounded) for
``PING`` to answer ``PONG``, and stops and reaps it when closed. It runs through the plugin's
process supervisor, so it dies with the test process even on ``kill -9`` (PR_SET_PDEATHSIG) and
a leftover is reaped at session end. ``stop()``/``start()`` keep the port, for fault tests.
``ExternalRedis`` is a server given by address (``--mc-redis``): used, never stopped. The
``mc_redis`` fixture (``fixtures/redis_store.py``) chooses between them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess
from pytest_mooncake.runtime.served_process import Readiness, ServedProcess

INSTALL_HINT = (
    "no redis-server binary found on PATH: install it with `apt-get install -y redis-server` "
    "(Debian/Ubuntu; scripts/setup.sh does this when run as root), set MC_REDIS_BIN to its "
    "path, or pass --mc-redis=HOST:PORT of a Redis you run yourself"
)
FALLBACK_PATHS = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
READY_TIMEOUT_ENV = "MC_REDIS_READY_TIMEOUT"
DEFAULT_READY_TIMEOUT = 20.0


class RedisUnavailable(RuntimeError):
    """Redis could not be started or reached; the message says what to do."""


def redis_client(address: str, timeout: float = 5.0, db: int = 0,
                 password: str | None = None, username: str | None = None) -> Any:
    """A ``redis-py`` client on ``HOST:PORT`` (no retries: a failure is seen as it happens)."""
    import redis  # noqa: PLC0415 (import-light plugin)
    from redis.backoff import NoBackoff  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    host, _, port = address.rpartition(":")
    return redis.Redis(host=host.strip("[]"), port=int(port), db=db, password=password,
                       username=username, socket_timeout=timeout,
                       socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))


def redis_answers(address: str, timeout: float = 0.5, password: str | None = None) -> bool:
    """Whether ``PING`` at ``address`` answers ``PONG`` within ``timeout``."""
    client = redis_client(address, timeout=timeout, password=password)
    try:
        return bool(client.ping())
    except Exception:  # redis-py raises ConnectionError, TimeoutError, ResponseError, ...
        return False
    finally:
        client.close()


def ready_timeout_from_env() -> float:
    """Seconds to wait for a started Redis to answer ``PING`` (``MC_REDIS_READY_TIMEOUT``)."""
    raw = os.environ.get(READY_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_READY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise RedisUnavailable(
            f"{READY_TIMEOUT_ENV} must be a positive number of seconds (got {raw!r})")
    return value


def find_redis() -> str:
    explicit = os.environ.get("MC_REDIS_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RedisUnavailable(f"MC_REDIS_BIN={explicit} is not an executable file; "
                                   + INSTALL_HINT)
        return explicit
    path = shutil.which("redis-server") or next(
        (p for p in FALLBACK_PATHS if os.access(p, os.X_OK)), None)
    if not path:
        raise RedisUnavailable(INSTALL_HINT)
    return path


class _RedisAddressMixin:
    address: str

    def client(self, timeout: float = 5.0, db: int = 0) -> Any:
        """A ``redis-py`` client on this server."""
        return redis_client(self.address, timeout=timeout, db=db,
                            password=getattr(self, "password", None))

    @property
    def uri(self) -> str:
        """The metadata connection string as Mooncake spells it."""
        return "redis://" + self.address

    @property
    def endpoints(self) -> list[str]:
        return [self.address]

    def healthy(self) -> bool:
        return redis_answers(self.address)


class RedisServer(_RedisAddressMixin, ServedProcess):
    """A single ``redis-server`` on loopback that we start, stop and restart ourselves."""

    unavailable = RedisUnavailable

    def __init__(self, workdir: Path, log_path: Path, binary: str | None = None,
                 ready_timeout: float | None = None, password: str | None = None):
        """``password``: the server requires it (``--requirepass``), as a deployment's may."""
        self.password = password
        self.binary = binary or find_redis()
        self.ready_timeout = ready_timeout if ready_timeout is not None else ready_timeout_from_env()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        argv = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.workdir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--protected-mode", "yes", "--logfile", "",
            "--loglevel", "warning", "--databases", "16",
        ] + (["--requirepass", password] if password else [])
        self.process = ManagedProcess(
            "redis", argv, log_path,
            ready=lambda _: redis_answers(self.address, password=self.password),
            ready_timeout=self.ready_timeout,
        )
        self.process.ready.__doc__ = f"PING at {self.address} answers PONG"

    def readiness(self) -> Readiness:
        return Readiness(
            server=f"redis-server ({self.binary})", probe=f"PING at {self.address}",
            ready="answer PONG", became="answered PONG", state="ready", log="its log",
            fix=("set MC_REDIS_BIN to a working redis-server, or pass --mc-redis=HOST:PORT of "
                 "a Redis you run yourself"),
            timeout_env=READY_TIMEOUT_ENV)

    def close(self) -> None:
        """Stop Redis for good and release its port."""
        try:
            self.process.terminate()
        finally:
            release_port(self.port)


class ExternalRedis(_RedisAddressMixin):
    """A Redis given with ``--mc-redis``: used, never started or stopped."""

    owned = False

    def __init__(self, address: str):
        self.address = address

    def check(self, timeout: float = 5.0) -> None:
        if not redis_answers(self.address, timeout=timeout):
            raise RedisUnavailable(
                f"--mc-redis={self.address}: PING got no PONG; check the address and that "
                f"redis-server runs there without a password, or omit --mc-redis to start one"
            )

    def stop(self) -> None:
        raise RedisUnavailable("the --mc-redis server is not ours to stop")

    start = kill = stop

    def close(self) -> None:
        pass

    def alive(self) -> bool:
        return self.healthy()

    def log_text(self) -> str:
        return f"(external redis at {self.address}: no log)"
