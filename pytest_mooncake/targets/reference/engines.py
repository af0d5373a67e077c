"""Engine and metadata handles of the reference target, over real processes.

An engine is ``python -m reference_engine engine ...`` started through the plugin's process
supervisor; the handle reads the ready line from its log and drives it over its control channel
(JSON lines on loopback). Metadata is the session etcd, the session Redis, or a
``python -m reference_engine metadata-server`` process per handle.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.nodes.proc_sockets import Socket
from pytest_mooncake.runtime.processes import ManagedProcess, Supervisor
from pytest_mooncake.targets.base import LookupResult, TargetError, TransferResult
from pytest_mooncake.targets.log_events import count_events
from pytest_mooncake.targets.p2p_deployment import P2pDirectory, P2pMetadata, start_deployed
from pytest_mooncake.targets.process_sockets import local_sockets
from pytest_mooncake.targets.reference import reference_log
from pytest_mooncake.targets.reference.process_env import reference_env
from reference_engine.descriptor import DescriptorError, decode, to_json
from reference_engine.engine.control_client import ControlClient, ControlError
from reference_engine.metadata import KeyLayout, MetadataError, open_store
from reference_engine.profiles import get_profile

READY = '"event": "ready"'
ENGINE_OPTIONS = frozenset({"ttl_ms", "buffer_size", "profile", "fixed_address", "data_port"})


def _latest_start(proc: ManagedProcess) -> str:
    """The log of the latest start (a restart appends to the same log)."""
    return proc.log_text().rsplit("--- start #", 1)[-1]


def _printed_ready(proc: ManagedProcess) -> bool:
    return READY in _latest_start(proc)


def _ready_line(proc: ManagedProcess, what: str) -> dict[str, Any]:
    """The ready line printed by the latest start of ``proc``."""
    for line in reversed(_latest_start(proc).splitlines()):
        if READY in line:
            return json.loads(line[line.index("{"):])
    raise TargetError(f"{what} printed no ready line; log tail:\n{proc.log_tail()}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


# ---------------------------------------------------------------------------------- metadata


class _StoreHandle:
    """Raw access to a metadata store, for planting and reading values (``MetadataHandle``).

    ``uri`` is what engines connect to (possibly a fault proxy); raw operations always go to
    the store itself, so a test can plant values while the proxy is broken.
    """

    kind = ""

    def __init__(self, uri: str, origin_uri: str, origin_address: str):
        self.uri = uri
        self._origin_uri = origin_uri
        self._address = origin_address
        self._store = open_store(origin_uri, timeout=5.0)
        self._layout = KeyLayout.from_env()

    @property
    def address(self) -> str:
        return self._address

    def get(self, key: str) -> bytes | None:
        return self._store.get(key)

    def put(self, key: str, value: bytes) -> None:
        self._store.put(key, value)

    def delete(self, key: str) -> bool:
        return self._store.delete(key)

    def keys(self, prefix: str = "") -> list[str]:
        return self._store.keys(prefix)

    def segment_key(self, segment: str) -> str:
        return self._layout.segment_key(segment)

    def rpc_meta_key(self, segment: str) -> str:
        return self._layout.rpc_meta_key(segment)

    def close(self) -> None:
        self._store.close()


class EtcdMetadataHandle(_StoreHandle):
    """The session etcd (shared: ``close`` only drops the client)."""

    kind = "etcd"

    def __init__(self, endpoints: list[str], origin: list[str] | None = None):
        self.endpoints = list(endpoints)
        origin = list(origin or endpoints)
        self._origin_endpoints = origin
        super().__init__("etcd://" + ";".join(self.endpoints), "etcd://" + ";".join(origin),
                         origin[0])

    def through(self, address: str) -> EtcdMetadataHandle:
        return EtcdMetadataHandle([address], origin=self._origin_endpoints)


class RedisMetadataHandle(_StoreHandle):
    """The session Redis (shared: ``close`` only drops the client)."""

    kind = "redis"

    def __init__(self, address: str, origin: str | None = None):
        self.endpoints = [address]
        origin = origin or address
        super().__init__("redis://" + address, "redis://" + origin, origin)

    def through(self, address: str) -> RedisMetadataHandle:
        return RedisMetadataHandle(address, origin=self._address)


class HttpMetadataHandle(_StoreHandle):
    """A reference HTTP metadata server process (stopped by ``close``), or a view of one
    through a proxy (``process`` None)."""

    kind = "http"

    def __init__(self, host_port: str, process: ManagedProcess | None = None,
                 origin: str | None = None):
        self.host_port = host_port
        self.process = process
        origin = origin or host_port
        super().__init__(f"http://{host_port}/metadata", f"http://{origin}/metadata", origin)

    @classmethod
    def start(cls, supervisor: Supervisor, log_path: Path) -> HttpMetadataHandle:
        proc = supervisor.start(
            log_path.stem,
            [sys.executable, "-m", "reference_engine", "metadata-server",
             "--listen", "127.0.0.1:0"],
            env=reference_env(), ready=_printed_ready, log_path=log_path,
        )
        port = _ready_line(proc, "metadata-server")["port"]
        return cls(f"127.0.0.1:{port}", proc)

    def through(self, address: str) -> HttpMetadataHandle:
        return HttpMetadataHandle(address, origin=self._address)

    def close(self) -> None:
        super().close()
        if self.process is not None:
            self.process.terminate()


# ---------------------------------------------------------------------------------- engines


class ReferenceEngineHandle:
    """One ``python -m reference_engine engine`` process publishing ``segment`` (``EngineHandle``).

    Beyond the protocol: ``local_read``/``local_write`` touch the engine's own buffer,
    ``instance_id`` and ``info()`` report what the running process published.
    """

    def __init__(self, supervisor: Supervisor, segment: str, metadata: Any, profile: str,
                 log_path: Path, ttl_ms: float | None = None, buffer_size: int = 1 << 20,
                 fixed_address: int | None = None, data_port: int = 0,
                 host: str = "127.0.0.1"):
        self.segment = segment
        self.host = host
        self.metadata = metadata
        self.profile = profile
        self._supervisor = supervisor
        self._log_path = log_path
        self._ttl_ms = ttl_ms
        self._buffer_size = buffer_size
        self._proc: ManagedProcess | None = None
        self._control: ControlClient | None = None
        self._ready: dict[str, Any] = {}
        self._start(fixed_address, data_port)

    # ------------------------------------------------------------------ lifecycle

    def _argv(self, fixed_address: int | None, data_port: int) -> list[str]:
        argv = [sys.executable, "-m", "reference_engine", "engine", "--name", self.segment,
                "--metadata", self.metadata.uri, "--protocol", "tcp", "--profile", self.profile,
                "--buffer-size", str(self._buffer_size), "--data-port", str(data_port),
                "--host", self.host]
        if self._ttl_ms is not None:
            argv += ["--ttl-ms", str(self._ttl_ms)]
        if fixed_address is not None:
            argv += ["--fixed-address", hex(fixed_address)]
        return argv

    def _start(self, fixed_address: int | None, data_port: int) -> None:
        try:
            self._proc = self._supervisor.start(
                f"engine-{self.segment}", self._argv(fixed_address, data_port),
                env=reference_env(), ready=_printed_ready, log_path=self._log_path)
        except Exception as exc:
            raise TargetError(f"engine {self.segment} did not start: {exc}") from exc
        self._ready = _ready_line(self._proc, f"engine {self.segment}")
        self._more_buffers: list[tuple[int, int]] = []
        self._control = ControlClient(self._ready["control_port"], host=self.host)

    def restart(self, keep_addresses: bool = False) -> None:
        """A new process under the same segment name (new instance_id). With
        ``keep_addresses`` it maps its buffer at the old address and reuses the data port, so
        its descriptor equals the old one except for ``instance_id`` and ``timestamp``."""
        old = self._ready
        if self.alive():
            self.stop()
        self._close_control()
        if keep_addresses:
            self._start(old["buffers"][0][0], old["data_port"])
        else:
            self._start(None, 0)

    def kill(self) -> None:
        """SIGKILL: no cleanup, the published keys stay behind."""
        self._close_control()
        if self._proc is not None:
            self._proc.kill()

    def stop(self) -> None:
        """Ask the engine to stop (it removes its own keys), SIGTERM/SIGKILL if it does not."""
        if self._proc is None or not self._proc.alive():
            self._close_control()
            return
        try:
            self._call("stop")
        except TargetError:
            pass
        self._close_control()
        if self._proc.wait_exit(self._proc.stop_timeout) is None:
            self._proc.terminate()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def sockets(self) -> list[Socket]:
        """Its TCP sockets as ``/proc`` shows them (beyond ``EngineHandle``)."""
        return local_sockets(self.pid if self.alive() else None, self.segment)

    def logs(self) -> str:
        return self._proc.log_text() if self._proc is not None else ""

    def log_events(self) -> Mapping[str, int]:
        return count_events(self.logs(), reference_log.RULES)

    def _close_control(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def _call(self, op: str, **args: Any) -> Any:
        if self._control is None or not self.alive():
            raise TargetError(f"engine {self.segment} is not running")
        try:
            return self._control.call(op, **args)
        except ControlError as exc:
            raise TargetError(f"engine {self.segment}: {exc}") from exc

    # ------------------------------------------------------------------ what it published

    @property
    def instance_id(self) -> str | None:
        return self._ready.get("instance_id")

    def info(self) -> Mapping[str, Any]:
        return self._call("info")

    def raw_descriptor(self) -> bytes | None:
        return self.metadata.get(self.metadata.segment_key(self.segment))

    def descriptor(self) -> Mapping[str, Any]:
        raw = self.raw_descriptor()
        if raw is None:
            raise TargetError(f"segment {self.segment} has no published descriptor")
        try:
            return to_json(decode(raw, self.segment))
        except DescriptorError as exc:
            raise TargetError(str(exc)) from exc

    def buffers(self) -> list[tuple[int, int]]:
        return [(int(a), int(n)) for a, n in self._ready["buffers"]] + self._more_buffers

    def register_buffer(self, length: int) -> tuple[int, int]:
        """Register another buffer of ``length`` bytes in the running engine; it republishes
        its descriptor (Mooncake's ``register_memory``)."""
        out = self._call("register_buffer", length=length)
        self._more_buffers.append((int(out["addr"]), int(out["length"])))
        return self._more_buffers[-1]

    # ------------------------------------------------------------------ transfers

    @staticmethod
    def _result(out: Mapping[str, Any]) -> TransferResult:
        data = out.get("data_b64")
        return TransferResult(ok=bool(out["ok"]), error=out.get("error"),
                              retries=int(out.get("retries", 0)),
                              data=base64.b64decode(data) if data is not None else None)

    def write(self, peer: str, offset: int, data: bytes) -> TransferResult:
        return self._result(self._call("write", peer=peer, offset=offset,
                                       data_b64=base64.b64encode(data).decode()))

    def read(self, peer: str, offset: int, length: int) -> TransferResult:
        return self._result(self._call("read", peer=peer, offset=offset, length=length))

    def write_at(self, peer: str, address: int, data: bytes) -> TransferResult:
        return self._result(self._call("write_at", peer=peer, addr=address,
                                       data_b64=base64.b64encode(data).decode()))

    def read_at(self, peer: str, address: int, length: int) -> TransferResult:
        return self._result(self._call("read_at", peer=peer, addr=address, length=length))

    def local_read(self, offset: int, length: int) -> bytes:
        """Bytes of this engine's own buffer (to check what a peer wrote)."""
        return base64.b64decode(self._call("local_read", offset=offset,
                                           length=length)["data_b64"])

    def local_write(self, offset: int, data: bytes) -> None:
        self._call("local_write", offset=offset, data_b64=base64.b64encode(data).decode())

    # ------------------------------------------------------------------ cache control

    def lookup(self, peer: str, force: bool = False) -> LookupResult:
        out = self._call("lookup", peer=peer, force=force)
        return LookupResult(ok=out["ok"], descriptor=out["descriptor"], error=out["error"])

    def set_ttl_ms(self, ttl_ms: int) -> None:
        self._call("set_ttl", ttl_ms=ttl_ms)

    @property
    def cache_ttl_ms(self) -> float | None:
        """The TTL its cache policy runs with (None: the legacy policy never expires)."""
        return self.info().get("ttl_ms")

    @property
    def retry_budget(self) -> int:
        """The retries its profile allows a failed transfer (MR-12)."""
        return get_profile(self.profile).engine.retry_budget

    def stats(self) -> Mapping[str, int]:
        return self._call("stats")

    def __repr__(self) -> str:
        return f"<ReferenceEngineHandle {self.segment} {self.profile} pid={self.pid}>"


class ReferenceEngines:
    """What the reference target starts: engines and metadata stores, all reaped on close."""

    def __init__(self, workdir: Path, profile: str, etcd_endpoints: Any,
                 bind_host: str = "127.0.0.1", redis_address: Any = None):
        self.workdir = Path(workdir)
        self.profile = profile
        self.bind_host = bind_host
        self._etcd_endpoints = etcd_endpoints
        self._redis_address = redis_address
        self.supervisor = Supervisor(self.workdir / "logs", name=f"reference-{profile}")
        self._serial = itertools.count(1)

    def _log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{_safe(name)}-{next(self._serial)}.log"

    def metadata_store(self, kind: str = "etcd") -> _StoreHandle:
        if kind == "etcd":
            if self._etcd_endpoints is None:
                raise TargetError("no etcd available to the reference target")
            return EtcdMetadataHandle(list(self._etcd_endpoints()))
        if kind == "redis":
            if self._redis_address is None:
                raise TargetError("no Redis available to the reference target")
            return RedisMetadataHandle(self._redis_address())
        if kind in ("http", "http:reference"):
            return HttpMetadataHandle.start(self.supervisor, self._log_path("metadata-server"))
        if kind == "p2p":
            return P2pMetadata(f"reference:{self.profile}", P2pDirectory(self.bind_host))
        raise TargetError(f"unknown metadata kind {kind!r}; use etcd, redis, http, "
                          f"http:reference or p2p")

    def start_engine(self, segment: str, metadata: Any, **options: Any) -> ReferenceEngineHandle:
        unknown = set(options) - ENGINE_OPTIONS
        if unknown:
            raise TargetError(f"the reference engine has no option(s) {sorted(unknown)}; "
                              f"known: {sorted(ENGINE_OPTIONS)}")
        profile = options.pop("profile", None) or self.profile
        return start_deployed(
            lambda name: ReferenceEngineHandle(self.supervisor, name, metadata, profile,
                                               self._log_path(f"engine-{segment}"),
                                               host=self.bind_host, **options),
            segment, metadata)

    def close(self) -> None:
        self.supervisor.stop_all()


__all__ = ["EtcdMetadataHandle", "HttpMetadataHandle", "RedisMetadataHandle",
           "ReferenceEngineHandle",
           "ReferenceEngines", "MetadataError"]
