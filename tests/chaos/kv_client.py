"""A client and a starter for kvserver.py, shared by the nemesis tests."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from pytest_mooncake.chaos.generator import OpSpec
from pytest_mooncake.chaos.runner import Outcome, fail, info, ok
from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.runtime.processes import ManagedProcess, Supervisor, port_open

SERVER = Path(__file__).with_name("kvserver.py")


class KvClient:
    """One connection per worker; refused connect = fail, lost after sending = info."""

    def __init__(self, port: int):
        self.port = port
        self.stream = None
        self.sock: socket.socket | None = None

    def invoke(self, spec: OpSpec) -> Outcome:
        if self.sock is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=1.0)
                self.stream = self.sock.makefile("rwb")
            except OSError as exc:
                self.close()
                return fail(f"connect: {exc}")
        request = {"op": spec.f, "key": spec.key, "value": spec.value}
        try:
            self.stream.write(json.dumps(request).encode() + b"\n")
            self.stream.flush()
            line = self.stream.readline()
            if not line:
                raise ConnectionError("server closed the connection")
            reply = json.loads(line)
        except (OSError, ValueError) as exc:
            self.close()
            return info(f"{type(exc).__name__}: {exc}")
        if not reply.get("ok"):
            return fail(reply.get("error", "refused"), instance=reply.get("instance"))
        return ok(reply.get("value"), instance=reply.get("instance"))

    def close(self) -> None:
        for part in (self.stream, self.sock):
            if part is not None:
                try:
                    part.close()
                except OSError:
                    pass
        self.stream = self.sock = None


def start_server(mc_processes: Supervisor, tmp_path: Path, mode: str
                 ) -> tuple[int, ManagedProcess]:
    """Start kvserver.py (``durable`` or ``lossy``) on a free port: (port, process)."""
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--log", str(tmp_path / "kv.log"),
            f"--{mode}", "--flush-every", "0.5"]
    return port, mc_processes.start(f"kv-{mode}", argv, ready=port_open(port), ready_timeout=15)
