"""The test side of a driver's control channel: JSON lines over a loopback socket."""

from __future__ import annotations

import base64
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.processes import ManagedProcess


class ControlError(RuntimeError):
    """The driver did not answer (it died, hung past the deadline, or broke the protocol)."""

    system_answer = True
    """For a chaos history: the system under test did not answer (its process died or hung),
    an indeterminate operation, not a bug of the client (``chaos.runner``)."""


def read_ready_file(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


class ControlClient:
    """One persistent connection to a driver; ``call`` sends a command and waits (bounded)."""

    def __init__(self, process: ManagedProcess, port: int, timeout: float = 60.0,
                 host: str = "127.0.0.1"):
        self.process = process
        self.port = port
        self.host = host
        self.timeout = timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stream: Any = None

    def _connect(self) -> None:
        self._sock = socket.create_connection((self.host, self.port), timeout=5)
        self._sock.settimeout(self.timeout)
        self._stream = self._sock.makefile("rwb")

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        with self._lock:
            if not self.process.alive():
                raise ControlError(f"{self.process.name} is not running (exit "
                                   f"{self.process.returncode}); last log lines:\n"
                                   f"{self.process.log_tail(10)}")
            started = time.monotonic()
            try:
                if self._stream is None:
                    self._connect()
                self._stream.write(json.dumps({"op": op, **args}).encode() + b"\n")
                self._stream.flush()
                line = self._stream.readline()
            except OSError as exc:
                self.close()
                raise ControlError(
                    f"{self.process.name}: {op} got no answer after "
                    f"{time.monotonic() - started:.1f}s ({exc}); last log lines:\n"
                    f"{self.process.log_tail(10)}") from None
            if not line:
                self.close()
                raise ControlError(f"{self.process.name} closed the control channel during {op}"
                                   f"{self._exit_note()}; last log lines:\n"
                                   f"{self.process.log_tail(10)}")
            return json.loads(line)

    def _exit_note(self) -> str:
        """How the driver ended, when it did within a moment (``: it died with SIGSEGV``)."""
        code = self.process.wait_exit(2.0)
        if code is None:
            return ""
        if code < 0:
            try:
                return f": it died with {signal.Signals(-code).name}"
            except ValueError:
                return f": it died with signal {-code}"
        return f": it exited with {code}"

    def close(self) -> None:
        for thing in (self._stream, self._sock):
            try:
                if thing is not None:
                    thing.close()
            except OSError:
                pass
        self._stream = self._sock = None
