"""Real Mooncake 0.3.13 runs its RDMA transport on emulated devices between two processes.

``transfer_engine_bench --protocol=rdma`` (the real binary in site-packages/mooncake, not the
venv's wrapper) completes at 4 KiB, 64 KiB and 1 MiB with target and initiator on one etcd, and
``mooncake.engine`` moves random bytes over ``rdma`` and reads back exactly what it wrote.
Without the wheel these are n/a locally and a failure under ``CI=true`` (CI installs it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.verbs import EmulatedFabric
from pytest_mooncake.waits import wait_until

INTEROP = Path(__file__).resolve().parents[1] / "interop"
BENCH_SECONDS = 3
PROCESS_DEADLINE = 120  # seconds a bench process may take in all (a loaded machine is slow)


def mooncake_package() -> tuple[Path | None, str | None]:
    """The installed wheel's package directory, or why there is none usable."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.submodule_search_locations:
        return None, "the Mooncake wheel (mooncake-transfer-engine-non-cuda) is not installed"
    pkg = Path(next(iter(spec.submodule_search_locations)))
    if not os.access(pkg / "transfer_engine_bench", os.X_OK):
        return None, f"the Mooncake wheel in {pkg} has no transfer_engine_bench binary"
    return pkg, None


def need_wheel(probe=mooncake_package, environ=os.environ) -> Path:
    pkg, reason = probe()
    if pkg is not None:
        return pkg
    if environ.get("CI", "").strip().lower() == "true":  # CI installs the wheel
        pytest.fail(f"CI=true, yet {reason}; scripts/setup.sh installs the [mooncake] extra",
                    pytrace=False)
    pytest.skip(f"n/a: {reason}")


def test_without_the_wheel_this_is_n_a_locally_and_a_failure_under_ci():
    absent = lambda: (None, "the Mooncake wheel is not installed")  # noqa: E731
    with pytest.raises(pytest.skip.Exception, match="n/a: the Mooncake wheel is not installed"):
        need_wheel(absent, {})
    with pytest.raises(pytest.fail.Exception, match="CI=true, yet the Mooncake wheel"):
        need_wheel(absent, {"CI": "true"})


@pytest.fixture
def rdma_fabric(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("vf")
    with EmulatedFabric.create("mlx5_0,mlx5_1", run_dir=run_dir, seed=1313) as fabric:
        yield fabric


class Bench:
    """One transfer_engine_bench process in its own group, killed by group at the end."""

    def __init__(self, exe: Path, args: list[str], env: dict, log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(  # noqa: S603
                [str(exe), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)


@pytest.mark.interop
@pytest.mark.parametrize("block", [4096, 65536, 1 << 20], ids=["4KiB", "64KiB", "1MiB"])
def test_transfer_engine_bench_completes_over_emulated_rdma(block, rdma_fabric, mc_etcd,
                                                            tmp_path):
    pkg = need_wheel()
    exe = pkg / "transfer_engine_bench"
    env = rdma_fabric.apply({**os.environ, "MC_TCP_BIND_ADDRESS": "127.0.0.1"})
    target_name = f"127.0.0.1:{free_port()}"
    common = ["--protocol=rdma", "--device_name=mlx5_0,mlx5_1", f"--metadata_server={mc_etcd.uri}",
              "--buffer_size=134217728"]
    target = Bench(exe, ["--mode=target", f"--local_server_name={target_name}", *common], env,
                   tmp_path / "target.log")
    initiator = None
    try:
        etcd = mc_etcd.client()
        published = wait_until(
            lambda: target.proc.poll() is not None
            or etcd.get(f"mooncake/ram/{target_name}".encode())[0] is not None,
            PROCESS_DEADLINE, f"the target's segment descriptor mooncake/ram/{target_name}")
        assert published and target.proc.poll() is None, (
            f"the target exited (rc {target.proc.poll()}); its log:\n{target.text()[-3000:]}")
        initiator = Bench(exe, [
            "--mode=initiator", f"--local_server_name=127.0.0.1:{free_port()}",
            f"--segment_id={target_name}", "--operation=write", f"--block_size={block}",
            "--batch_size=32", "--threads=1", f"--duration={BENCH_SECONDS}", *common,
        ], env, tmp_path / "initiator.log")
        # the initiator's own emulated NIC says RDMA work requests completed while it ran
        ctl = rdma_fabric.control(initiator.proc.pid, timeout=PROCESS_DEADLINE)
        assert ctl.wait("completed", 32, timeout=PROCESS_DEADLINE) >= 32
        rc = initiator.proc.wait(PROCESS_DEADLINE)
        done = re.findall(r"Test completed: duration ([\d.]+), batch count (\d+)", initiator.text())
        assert rc == 0 and done and int(done[-1][1]) > 0, (
            f"transfer_engine_bench initiator (rc {rc}) did not complete; its log:\n"
            f"{initiator.text()[-3000:]}\ntarget log:\n{target.text()[-2000:]}")
        assert "RDMA device: mlx5_0" in initiator.text()
        # the target's QPs were connected by Mooncake's handshake, through the emulator
        connected = [q for q in rdma_fabric.control(target.proc.pid).counters().qps.values()
                     if q.state == "rts"]
        assert connected, f"target has no QP in RTS; its log:\n{target.text()[-2000:]}"
    finally:
        if initiator is not None:
            initiator.stop()
        target.stop()


def _real_engine_module():
    spec = importlib.util.spec_from_file_location("_verbs_realengine", INTEROP / "realengine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.interop
def test_python_engine_round_trip_of_random_bytes_over_rdma(rdma_fabric, mc_etcd, tmp_path):
    """One engine discovers the devices itself (sysfs served by the emulator), the other is
    given mlx5_1; 4 KiB, 64 KiB and 1 MiB of random bytes go out and come back exactly."""
    need_wheel()
    RealEngine = _real_engine_module().RealEngine
    env = rdma_fabric.apply()
    a = RealEngine(f"127.0.0.1:{free_port()}", mc_etcd.uri, tmp_path / "a.log", size=8 << 20,
                   timeout=PROCESS_DEADLINE, protocol="rdma", device="", env=env)
    try:
        b = RealEngine(f"127.0.0.1:{free_port()}", mc_etcd.uri, tmp_path / "b.log",
                       size=8 << 20, timeout=PROCESS_DEADLINE, protocol="rdma", device="mlx5_1",
                       env=env)
        try:
            offset = 4096
            for size in (4096, 64 << 10, 1 << 20):
                data = os.urandom(size)
                assert a.write(b.name, b.buffer + offset, data) == 0, a.log_tail()
                assert b.peek(offset, size) == data
                rc, back = a.read(b.name, b.buffer + offset, size)
                assert rc == 0 and back == data, a.log_tail()
                offset += size
            assert "Topology discovery complete. Found 2 HCAs" in a.log_tail(200)
            posted = rdma_fabric.control(a.proc.pid).counters().posted
            assert posted >= 6, f"only {posted} RDMA work requests for 6 transfers"
        finally:
            b.close()
    finally:
        a.close()
