"""Peer processes on emulated devices, and connected endpoints between them (tests/verbs)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_mooncake.verbs import EmulatedFabric

HERE = Path(__file__).parent
CALL_TIMEOUT = 60.0  # seconds one verbs call of a peer may take (a loaded machine is slow)

# verbs.h enums the tests name
WRITE, READ = "write", "read"
ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ = 1, 2, 4
QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_ERR = 0, 1, 2, 3, 6
WC_SUCCESS, WC_LOC_PROT_ERR, WC_WR_FLUSH_ERR = 0, 4, 5
WC_REM_ACCESS_ERR, WC_RETRY_EXC_ERR = 10, 12
WC_RDMA_WRITE, WC_RDMA_READ = 1, 2
EVENT_CQ_ERR, EVENT_QP_FATAL, EVENT_DEVICE_FATAL = 0, 1, 8
EVENT_PORT_ACTIVE, EVENT_PORT_ERR, EVENT_GID_CHANGE = 9, 10, 18
PORT_DOWN, PORT_ACTIVE = 1, 4


class PeerError(RuntimeError):
    pass


class PeerProcess:
    """tests/verbs/verbs_peer.py in its own process group, on the fabric's environment."""

    def __init__(self, fabric: EmulatedFabric, probe: Path, log: Path, env: dict | None = None):
        self.log_path = log
        self.log = open(log, "wb")  # noqa: SIM115 (closed in stop)
        environ = fabric.apply()
        environ["MC_VERBS_PROBE"] = str(probe)
        environ.update(env or {})
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, str(HERE / "verbs_peer.py")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, env=environ, start_new_session=True)
        self.pid = self.proc.pid
        self._buf = b""

    def call(self, method: str, *args, timeout: float = CALL_TIMEOUT, **kwargs):
        request = {"m": method, "a": list(args), "k": kwargs}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        reply = json.loads(self._readline(timeout, method))
        if "error" in reply:
            raise PeerError(f"{method}{tuple(args)} in peer {self.pid}: {reply['error']}")
        return reply["ok"]

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kw: self.call(method, *args, **kw)

    def _readline(self, timeout: float, what: str) -> bytes:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerError(f"peer {self.pid} gave no answer to {what} in {timeout:g} s; "
                                    f"its log:\n{self.stderr()}")
                if sel.select(left):
                    chunk = os.read(self.proc.stdout.fileno(), 65536)
                    if not chunk:
                        raise PeerError(f"peer {self.pid} exited during {what} "
                                        f"(rc {self.proc.wait(10)}); its log:\n{self.stderr()}")
                    self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def stderr(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)

    def stop(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()
        self.log.close()


class Endpoint:
    """One side of a connection: a device context, CQ, QP and a registered buffer."""

    def __init__(self, peer: PeerProcess, device: str = "mlx5_0", size: int = 1 << 20,
                 depth: int = 64, cqe: int = 256, access: int = 7, channel: bool = False):
        self.peer, self.device = peer, device
        self.ctx = peer.open(device)
        self.cq = peer.cq(self.ctx, cqe, channel)
        self.qp = peer.qp(self.ctx, self.cq, depth)
        self.qpn = peer.qpn(self.qp)
        self.size = size
        self.addr = peer.alloc(size)
        self.mr, self.key = peer.reg(self.ctx, self.addr, size, access)
        self.gid = peer.gid(self.ctx, 3)

    def connect(self, other: Endpoint, access: int = 7) -> None:
        rc = self.peer.connect(self.qp, other.qpn, other.gid, access)
        assert rc == 0, f"connecting QP {self.qpn} to {other.qpn} failed with {rc}"

    def post(self, op: str, other: Endpoint, wr_id: int, length: int, offset: int = 0,
             remote_offset: int = 0, **kw) -> dict:
        return self.peer.post(self.qp, op, wr_id, self.addr + offset, length, self.key,
                              other.addr + remote_offset, other.key, **kw)

    def poll_until(self, count: int, timeout: float = 30.0) -> list[dict]:
        """Poll until ``count`` completions came (bounded); fails naming what did come."""
        got: list[dict] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            got += self.peer.poll(self.cq, count - len(got))
            if len(got) < count and time.monotonic() > deadline:
                raise AssertionError(f"{len(got)} of {count} completions after {timeout:g} s; "
                                     f"the last ones: {got[-3:]}")
        return got


def connected_pair(peer_a: PeerProcess, peer_b: PeerProcess, **kw) -> tuple[Endpoint, Endpoint]:
    a, b = Endpoint(peer_a, **kw), Endpoint(peer_b, **kw)
    a.connect(b)
    b.connect(a)
    return a, b
