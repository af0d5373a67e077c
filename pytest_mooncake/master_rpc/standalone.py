"""One release's ``mooncake_master`` alone (no HA, no etcd) on a loopback port: what the probe
and the wire tests talk to. Ready once it answers ServiceReady on its RPC port."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pytest_mooncake.master_rpc.client import MasterRpcClient
from pytest_mooncake.master_rpc.layouts import LAYOUTS
from pytest_mooncake.releases import ReleaseEnv
from pytest_mooncake.runtime.deadlines import wait_until
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess


class StandaloneMaster:
    """``with StandaloneMaster(env, workdir) as m: m.address``; the process is killed (and
    its ports released) on exit, also when the start failed."""

    def __init__(self, env: ReleaseEnv, workdir: Path, ready_timeout: float = 30.0,
                 extra_flags: tuple[str, ...] = ()):
        binary = env.master_binary
        if binary is None:
            raise FileNotFoundError(f"{env.describe()} ships no mooncake_master")
        self.env = env
        self.rpc_port, self.admin_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.rpc_port}"
        argv = [str(binary), f"--rpc_port={self.rpc_port}", "--rpc_address=127.0.0.1",
                f"--metrics_port={self.admin_port}", "--enable_http_metadata_server=false",
                *extra_flags]
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess(f"mooncake_master-{env.version}", argv,
                                      workdir / f"master-{self.rpc_port}.log",
                                      env=env.env(), cwd=workdir, ready=self._answers,
                                      ready_timeout=ready_timeout)

    def _answers(self, _proc: ManagedProcess) -> bool:
        try:
            with MasterRpcClient(self.address, LAYOUTS[0], timeout=1.0) as c:
                return c.service_ready().ok
        except (OSError, ValueError):
            return False

    def __enter__(self) -> StandaloneMaster:
        try:
            self.process.start()
            self.process.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP, returning once every thread is stopped (the signal is delivered to each
        thread as it is next scheduled: a call sent right after ``kill`` may still be served)."""
        self.process.send_signal(signal.SIGSTOP)
        wait_until(self._all_threads_stopped, timeout, "every master thread to stop")

    def _all_threads_stopped(self) -> bool:
        tasks = f"/proc/{self.process.pid}/task"
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            states.append(text[text.rfind(")") + 2])
        return bool(states) and all(s in "tT" for s in states)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def log(self) -> str:
        return self.process.log_text()

    def close(self) -> None:
        try:
            self.process.kill()
        finally:
            release_port(self.rpc_port)
            release_port(self.admin_port)
