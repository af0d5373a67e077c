"""What answers on the control channel of a deployment's engine or store client, by the
cluster file's ``protocol``: the project's ``driver/mooncake_driver.py`` (a real ``mooncake.engine`` /
``mooncake.store`` behind JSON lines) or ``python -m reference_engine engine|client``.

Strategy objects with one surface, so the cluster target's handles never ask which one they
have. A channel that does not answer raises ``ControlError`` naming the endpoint; a command the
protocol has no means for raises ``TargetLacks`` with the reason.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.runtime.loopback_http import http_request, json_body
from pytest_mooncake.targets.base import Capability, LookupResult, TransferResult
from pytest_mooncake.targets.mooncake import mooncake_log
from pytest_mooncake.targets.mooncake.driver.control_channel import (
    ControlClient,
    ControlError,
    b64,
    unb64,
)
from pytest_mooncake.targets.mooncake.driver.engine_proxies import DriverCommands
from pytest_mooncake.targets.mooncake.store_clients import StoreClient
from pytest_mooncake.targets.reference import reference_log


class RemoteProcess:
    """Stands in for a process this target did not start, where ``ControlClient`` asks its own
    process (liveness, name, log for messages): the node owns it."""

    def __init__(self, name: str, where: str):
        self.name = name
        self.where = where
        self.returncode = None
        self.pid = None

    def alive(self) -> bool:
        return True

    def log_tail(self, lines: int = 30) -> str:
        return f"({self.name} runs at {self.where}; its log is read through its node)"

    def wait_exit(self, timeout: float) -> int | None:
        """Its exit status is its node's to see, not this host's: unknown (None)."""
        return None


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


# ------------------------------------------------------------------------------ engines


DRIVER_LACKS = {
    Capability.FORCED_REFRESH: (
        "engines behind pytest_mooncake's driver run mooncake.engine.TransferEngine, which "
        "offers no forced refresh of one peer's descriptor"),
    Capability.ENGINE_COUNTERS: (
        "engines behind pytest_mooncake's driver run mooncake.engine.TransferEngine, which "
        "exposes no counters (the driver counts only its own calls)"),
}
"""What a driver engine has no means for (``lacks`` of the cluster target's engines)."""


class DriverEngineWire(DriverCommands):
    """A driver.py engine: ``DriverCommands`` over its control channel."""

    protocol = "driver"
    lacks_by_protocol = DRIVER_LACKS
    log_rules = mooncake_log.RULES
    """How its log's lines read as ``log_events`` counters (a real Mooncake engine's)."""
    sets_ttl = False
    """A driver engine reads its cache bound from its environment at start (``cache_env``)."""

    def __init__(self, segment: str, endpoint: str, metadata: Any,
                 lacks: Mapping[Capability, str]):
        self.segment = segment
        self.metadata = metadata
        self.lacks = dict(lacks)
        host, port = _split(endpoint)
        self.control = ControlClient(RemoteProcess(f"engine {segment}", endpoint), port,
                                     host=host)
        self.info: dict[str, Any] = {}
        self.opened: set[str] = set()

    def refresh_info(self) -> dict[str, Any]:
        reply = self._call("info")
        if not reply.get("ok", True) and "error" in reply:
            raise ControlError(f"engine {self.segment}: info: {reply['error']}")
        self.info = {k: v for k, v in reply.items() if k != "ok"}
        return self.info

    def request_stop(self) -> None:
        try:
            self.control.call("stop")
        finally:
            self.control.close()

    def close(self) -> None:
        self.control.close()


class ReferenceEngineWire:
    """A reference engine (``python -m reference_engine engine``): its control channel answers
    ``{"ok": true, "result": ...}``; payloads travel as ``data_b64``."""

    protocol = "reference"
    lacks_by_protocol: Mapping[Capability, str] = {}
    log_rules = reference_log.RULES
    sets_ttl = True

    def __init__(self, segment: str, endpoint: str, metadata: Any,
                 lacks: Mapping[Capability, str]):
        self.segment = segment
        self.metadata = metadata
        self.lacks = dict(lacks)
        self.endpoint = endpoint
        host, port = _split(endpoint)
        self.control = ControlClient(RemoteProcess(f"engine {segment}", endpoint), port,
                                     host=host)
        self.info: dict[str, Any] = {}

    def _call(self, op: str, **args: Any) -> Any:
        reply = self.control.call(op, **args)
        if not reply.get("ok"):
            raise ControlError(f"engine {self.segment} at {self.endpoint} refused {op}: "
                               f"{reply.get('error')}")
        return reply.get("result")

    def refresh_info(self) -> dict[str, Any]:
        self.info = dict(self._call("info"))
        return self.info

    def register_buffer(self, length: int) -> tuple[int, int]:
        out = self._call("register_buffer", length=length)
        return int(out["addr"]), int(out["length"])

    @staticmethod
    def _result(out: Mapping[str, Any]) -> TransferResult:
        data = out.get("data_b64")
        return TransferResult(ok=bool(out["ok"]), error=out.get("error"),
                              retries=int(out.get("retries", 0)),
                              data=base64.b64decode(data) if data is not None else None)

    def write(self, peer: str, offset: int, data: bytes) -> TransferResult:
        return self._result(self._call("write", peer=peer, offset=offset, data_b64=b64(data)))

    def read(self, peer: str, offset: int, length: int) -> TransferResult:
        return self._result(self._call("read", peer=peer, offset=offset, length=length))

    def write_at(self, peer: str, address: int, data: bytes) -> TransferResult:
        return self._result(self._call("write_at", peer=peer, addr=address, data_b64=b64(data)))

    def read_at(self, peer: str, address: int, length: int) -> TransferResult:
        return self._result(self._call("read_at", peer=peer, addr=address, length=length))

    def local_read(self, offset: int, length: int) -> bytes:
        return unb64(self._call("local_read", offset=offset, length=length)["data_b64"])

    def local_write(self, offset: int, data: bytes) -> None:
        self._call("local_write", offset=offset, data_b64=b64(data))

    def lookup(self, peer: str, force: bool = False) -> LookupResult:
        out = self._call("lookup", peer=peer, force=force)
        return LookupResult(ok=out["ok"], descriptor=out["descriptor"], error=out["error"])

    def set_ttl_ms(self, ttl_ms: int) -> None:
        self._call("set_ttl", ttl_ms=ttl_ms)

    def stats(self) -> Mapping[str, int]:
        return self._call("stats")

    def request_stop(self) -> None:
        try:
            self._call("stop")
        finally:
            self.control.close()

    def close(self) -> None:
        self.control.close()


ENGINE_WIRES = {"driver": DriverEngineWire, "reference": ReferenceEngineWire}


# ------------------------------------------------------------------------------ store clients


class DriverStoreWire(StoreClient):
    """A driver.py store client (``mooncake.store``) reached at its control endpoint; the
    process is its node's, so ``kill``/``stop`` belong to the handle that owns the node."""

    protocol = "driver"

    @classmethod
    def at(cls, index: int, endpoint: str) -> DriverStoreWire:
        host, port = _split(endpoint)
        remote = RemoteProcess(f"store client {index}", endpoint)
        wire = cls(index, remote, ControlClient(remote, port, host=host))  # type: ignore[arg-type]
        info = wire.control.call("info")
        wire.hostname = str(info.get("hostname", ""))
        return wire

    def close(self) -> None:
        self.control.close()


class ReferenceStoreWire:
    """A reference store client (``python -m reference_engine client``): HTTP ``/put``,
    ``/get``, ``/exists``, ``/remove``, ``/status`` on its control port."""

    protocol = "reference"

    def __init__(self, index: int, endpoint: str):
        self.index = index
        self.url = f"http://{endpoint}"
        self.hostname = ""

    @classmethod
    def at(cls, index: int, endpoint: str) -> ReferenceStoreWire:
        wire = cls(index, endpoint)
        wire.hostname = str(wire.status().get("client_id", ""))
        return wire

    def status(self) -> dict[str, Any]:
        answer = http_request("GET", self.url + "/status", timeout=5.0)
        return answer.json() if answer.status == 200 else {}

    def _op(self, op: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        try:
            answer = http_request("POST", f"{self.url}/{op}", json_body(body), timeout=timeout)
        except OSError as exc:
            return {"ok": False, "error": f"{op}: no answer from {self.url}: {exc}"}
        try:
            return json.loads(answer.body)
        except ValueError:
            return {"ok": False, "error": f"{op}: HTTP {answer.status}: {answer.text[:200]}"}

    def put(self, key: str, size: int = 64) -> dict[str, Any]:
        return self._op("put", {"key": key, "size": size})

    def get(self, key: str) -> dict[str, Any]:
        return self._op("get", {"key": key})

    def exists(self, key: str) -> dict[str, Any]:
        return self._op("exists", {"key": key})

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        return self._op("remove", {"key": key, "force": force})

    def close(self) -> None:
        pass


STORE_WIRES = {"driver": DriverStoreWire, "reference": ReferenceStoreWire}

