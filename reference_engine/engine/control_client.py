"""The parent's side of the control channel (see ``control``)."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from reference_engine.hub import readable_within


class ControlError(RuntimeError):
    """The engine refused a request, or the channel broke."""


class _Line:
    """One connection of the channel: a socket and its buffered file."""

    def __init__(self, address: tuple[str, int], timeout: float):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.file = self.sock.makefile("rwb")

    def stale(self) -> bool:
        """An idle connection has nothing to read: if it has, the engine closed it (its
        receive timeout), so a request must not go on it."""
        try:
            return readable_within(self.sock, 0)
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        for obj in (self.file, self.sock):
            try:
                obj.close()
            except OSError:
                pass


class ControlClient:
    """Requests to one engine. Each caller thread gets a connection of its own (kept for reuse),
    so calls from several threads run at once, as the engine serves connections concurrently:
    a slow request (a metadata fetch on a cut network) does not hold up another caller's."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 60.0):
        self.address = (host, port)
        self.timeout = timeout
        self._idle: list[_Line] = []
        self._busy: set[_Line] = set()
        self._lock = threading.Lock()
        self._closed = False

    def _take(self, op: str) -> _Line | None:
        """An idle connection that is still open, or None (the caller dials a new one)."""
        while True:
            with self._lock:
                if self._closed:
                    raise ControlError(f"control channel {self.address}: {op}: closed")
                line = self._idle.pop() if self._idle else None
            if line is None or not line.stale():
                return line
            line.close()

    def call(self, op: str, **args: Any) -> Any:
        line = self._take(op)
        try:
            if line is None:
                line = _Line(self.address, self.timeout)
            with self._lock:
                self._busy.add(line)
            line.file.write(json.dumps({"op": op, **args}).encode() + b"\n")
            line.file.flush()
            text = line.file.readline()
        except (OSError, ValueError) as exc:  # ValueError: closed by close() meanwhile
            self._drop(line)
            raise ControlError(f"control channel {self.address}: {op}: {exc}") from None
        if not text:
            self._drop(line)
            raise ControlError(f"control channel {self.address}: {op}: engine closed it")
        with self._lock:
            self._busy.discard(line)
            keep = not self._closed
            if keep:
                self._idle.append(line)
        if not keep:
            line.close()
        reply = json.loads(text)
        if not reply.get("ok"):
            raise ControlError(f"{op}: {reply.get('error')}")
        return reply.get("result")

    def _drop(self, line: _Line | None) -> None:
        if line is None:
            return
        with self._lock:
            self._busy.discard(line)
        line.close()

    def close(self) -> None:
        """Close every connection, also those a caller is waiting on (its call then fails)."""
        with self._lock:
            self._closed = True
            lines = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        for line in lines:
            line.close()
