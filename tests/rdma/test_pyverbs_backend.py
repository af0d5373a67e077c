"""The pyverbs backend: import-guarded here; exercised on an emulated device (a child process
under the plugin's emulated libibverbs) and on hosts with an RNIC or soft-RoCE."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mooncake.verbs import EmulatedFabric
from reference_engine.rdma import pyverbs_backend
from reference_engine.rdma.verbs import AsyncEventType, Opcode, QPState, WcStatus, WorkRequest

OK, WHY = pyverbs_backend.available()


def test_backend_imports_without_pyverbs_and_explains_itself():
    if not OK:
        assert "python3-pyverbs" in WHY and "RNIC" in WHY
    else:
        assert WHY


@pytest.mark.skipif(not OK, reason=f"pyverbs not importable / no RDMA device: {WHY}")
def test_loopback_rdma_write_on_a_real_device():  # pragma: no cover - needs an RNIC
    ctx = pyverbs_backend.PyverbsContext(WHY)
    mem = pyverbs_backend.HostMemory()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(16)
    src, dst = mem.alloc(4096), mem.alloc(4096)
    mr_src, mr_dst = pd.reg_mr(src, 4096), pd.reg_mr(dst, 4096)
    a, b = ctx.create_qp(pd, cq, 16), ctx.create_qp(pd, cq, 16)
    for qp, peer in ((a, b), (b, a)):
        qp.to_init()
        qp.to_rtr(peer.qp_num, ctx.gid, ctx.lid)
        qp.to_rts()
    assert a.state == QPState.RTS
    mem.write(src, b"pyverbs!")
    a.post_send([WorkRequest(9, Opcode.RDMA_WRITE, src, 8, mr_src.lkey, dst, mr_dst.rkey)])
    wcs = []
    for _ in range(100000):
        wcs += cq.poll(4)
        if wcs:
            break
    assert wcs and wcs[0].wr_id == 9 and wcs[0].status == WcStatus.SUCCESS
    assert mem.read(dst, 8) == b"pyverbs!"


# ------------------------------------------------------------------ on an emulated device

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("pyverbs_loopback.py")
DEBIAN_DIST = Path("/usr/lib/python3/dist-packages")
CHILD_DEADLINE = 120  # seconds; the child's own waits are 30 s each


def pyverbs_dir() -> tuple[Path | None, str | None]:
    """Where this interpreter finds pyverbs: importable already (None, None), Debian's
    python3-pyverbs built for this Python (its dist-packages), or why neither."""
    if importlib.util.find_spec("pyverbs") is not None:
        return None, None
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    if any((DEBIAN_DIST / "pyverbs").glob(f"device.{tag}-*.so")):
        return DEBIAN_DIST, None
    return None, (f"pyverbs for Python {sys.version_info.major}.{sys.version_info.minor} is "
                  f"neither importable nor in {DEBIAN_DIST} (apt-get install python3-pyverbs; "
                  f"scripts/setup.sh does as root)")


def test_backend_runs_on_an_emulated_device(tmp_path):
    """The pyverbs backend on the plugin's emulated libibverbs: an RDMA WRITE between two of
    its QPs lands, a wrong rkey completes REM_ACCESS_ERR and the next WR flushes, and a
    QP-fatal raised through the control socket reaches its event queue (the reader must not
    hold the GIL while it waits)."""
    where, why = pyverbs_dir()
    if why is not None:
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"CI=true, yet {why}", pytrace=False)
        pytest.skip(f"n/a: {why}")
    env_path = tmp_path / "pyverbs-only"
    env_path.mkdir()
    if where is not None:  # pyverbs alone on the path, not the rest of Debian's packages
        (env_path / "pyverbs").symlink_to(where / "pyverbs")
    with EmulatedFabric.create("mlx5_0", run_dir=tmp_path / "vf", seed=5) as fabric:
        env = fabric.apply()
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(env_path)])
        done = subprocess.run([sys.executable, str(CHILD), "mlx5_0"], env=env, cwd=ROOT,  # noqa: S603
                              capture_output=True, text=True, timeout=CHILD_DEADLINE)
    assert done.returncode == 0, f"child exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["device"] == "mlx5_0"
    assert seen["ok"] == [9, WcStatus.SUCCESS] and seen["landed"] == "pyverbs!", seen
    assert seen["bad_rkey"] == [10, WcStatus.REM_ACCESS_ERR], seen
    assert seen["after_error"] == [11, WcStatus.WR_FLUSH_ERR], seen
    # pyverbs 44's AsyncEvent carries no QP, so the backend's event names none
    assert seen["event"] is not None and seen["event"][0] == AsyncEventType.QP_FATAL, seen
