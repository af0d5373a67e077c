"""The parent's side of the control channel (see ``control``)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from reference_engine.hub import readable_within


class ControlError(RuntimeError):
    """The engine refused a request, or the channel broke."""


class ControlClient:
    """One connection, one request at a time (a lock serialises callers)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 60.0):
        self.address = (host, port)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout)
        self._file = self._sock.makefile("rwb")

    def call(self, op: str, **args: Any) -> Any:
        with self._lock:
            if self._sock is not None and _readable_now(self._sock):
                # an idle channel has nothing to read: the engine closed it (its receive
                # timeout), so this request goes on a new connection instead of a dead one
                self.close()
            try:
                if self._sock is None:
                    self._connect()
                self._file.write(json.dumps({"op": op, **args}).encode() + b"\n")
                self._file.flush()
                line = self._file.readline()
            except OSError as exc:
                self.close()
                raise ControlError(f"control channel {self.address}: {op}: {exc}") from None
            if not line:
                self.close()
                raise ControlError(f"control channel {self.address}: {op}: engine closed it")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(f"{op}: {reply.get('error')}")
        return reply.get("result")

    def close(self) -> None:
        for obj in (self._file, self._sock):
            if obj is not None:
                try:
                    obj.close()
                except OSError:
                    pass
        self._sock = self._file = None


def _readable_now(sock: socket.socket) -> bool:
    try:
        return readable_within(sock, 0)
    except (OSError, ValueError):
        return True
