"""A handle on one real Mooncake TransferEngine running ``real_engine_driver.py`` in a child.

The child runs in its own process group, dies with us (PDEATHSIG), and is killed by group on
close; every reply is awaited with a deadline.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_mooncake.runtime.die_with_parent import wrap

DRIVER = Path(__file__).with_name("real_engine_driver.py")


class RealEngineError(RuntimeError):
    pass


class RealEngine:
    def __init__(
        self,
        name: str,
        metadata_uri: str,
        log_path: Path,
        size: int = 64 << 20,
        timeout: float = 30.0,
        protocol: str = "tcp",
        device: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        """``protocol``/``device`` go to TransferEngine.initialize; ``env`` replaces this
        process's environment (e.g. an emulated-RDMA fabric's)."""
        self.name = name
        self.timeout = timeout
        self.log_path = log_path
        env = dict(os.environ if env is None else env, MC_TCP_BIND_ADDRESS="127.0.0.1")
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(  # noqa: S603
            # through the exec wrapper: it dies with this process (no preexec_fn, which runs
            # Python in the forked child of a threaded parent)
            wrap([sys.executable, str(DRIVER), name, metadata_uri, str(size), protocol, device],
                 env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            start_new_session=True,
        )
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._pending = b""
        try:
            ready = self._reply()
            if ready.get("event") != "ready":
                raise RealEngineError(f"real engine {name} failed to start: {ready}")
        except BaseException:
            self.close()
            raise
        self.buffer: int = ready["buffer"]
        self.size: int = ready["size"]

    def _reply(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                if line.startswith(b"@@ "):
                    return json.loads(line[3:])
            left = deadline - time.monotonic()
            if left <= 0:
                raise RealEngineError(
                    f"no reply from real engine {self.name} in {self.timeout}s;"
                    f" log tail:\n{self.log_tail()}"
                )
            if self._sel.select(left):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RealEngineError(
                        f"real engine {self.name} exited "
                        f"(rc={self.proc.poll()}); log tail:\n{self.log_tail()}"
                    )
                self._pending += chunk

    def call(self, **cmd) -> dict:
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._reply()

    # convenience wrappers ----------------------------------------------------------------

    def write(self, target: str, remote: int, data: bytes) -> int:
        return self.call(op="write", target=target, remote=remote, data=data.hex())["rc"]

    def read(self, target: str, remote: int, length: int) -> tuple[int, bytes]:
        r = self.call(op="read", target=target, remote=remote, len=length)
        return r["rc"], bytes.fromhex(r["data"])

    def write_batch(self, target: str, remotes: list[int], length: int, data: bytes) -> int:
        return self.call(
            op="write_batch", target=target, remotes=remotes, len=length, data=data.hex()
        )["rc"]

    def read_batch(self, target: str, remotes: list[int], length: int) -> tuple[int, bytes]:
        r = self.call(op="read_batch", target=target, remotes=remotes, len=length)
        return r["rc"], bytes.fromhex(r["data"])

    def peek(self, off: int, length: int) -> bytes:
        return bytes.fromhex(self.call(op="peek", off=off, len=length)["data"])

    def poke(self, off: int, data: bytes) -> None:
        self.call(op="poke", off=off, data=data.hex())

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        finally:
            self._sel.close()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self._log.close()
