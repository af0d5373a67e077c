"""One release's ``mooncake_master`` alone (no HA, no etcd) on a loopback port: what the probe
and the wire tests talk to. Ready once it answers ServiceReady on its RPC port."""

from __future__ import annotations

from pathlib import Path

from pytest_mooncake.master_rpc.client import MasterRpcClient
from pytest_mooncake.master_rpc.layouts import LAYOUTS
from pytest_mooncake.releases import ReleaseEnv
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

    def log(self) -> str:
        return self.process.log_text()

    def close(self) -> None:
        try:
            self.process.kill()
        finally:
            release_port(self.rpc_port)
            release_port(self.admin_port)
