"""A pytest process SIGKILLed while its partition is in place leaves the partition behind, in the
ledger; ``python -m pytest_mooncake.cluster heal FILE`` removes it and traffic flows again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from test_partition import reach

DOOMED = textwrap.dedent("""
    import os, pathlib, time
    from pytest_mooncake.nodes import Fleet

    def test_hold_a_partition():
        fleet = Fleet.from_file(os.environ["LAB_CLUSTER_FILE"], run="doomed")
        fleet.faults.partition("n2", ["n3"])
        pathlib.Path(os.environ["PARTITIONED"]).write_text("applied")
        deadline = time.monotonic() + 120   # killed long before this
        while time.monotonic() < deadline:
            time.sleep(0.05)
""")


def test_cluster_heal_undoes_the_partition_of_a_killed_run(mc_lab, tmp_path):
    test_file = tmp_path / "test_doomed.py"
    test_file.write_text(DOOMED)
    flag = tmp_path / "partitioned"
    env = {**os.environ, "LAB_CLUSTER_FILE": str(mc_lab.cluster_file), "PARTITIONED": str(flag)}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:pytest_mooncake", str(test_file)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert run.poll() is None, run.stdout.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the doomed run never applied its partition"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(30)
        assert run.returncode == -signal.SIGKILL

        left = mc_lab.fleet.ledger.outstanding("doomed")
        assert [e.fault["kind"] for e in left] == ["partition"]
        assert mc_lab.fleet.faults.in_place("n2") == [f"nft mcchaos_{left[0].id}"]
        assert reach(mc_lab, "n2", "n3") == "ETIMEDOUT"

        heal = subprocess.run([sys.executable, "-m", "pytest_mooncake.cluster", "heal",
                               str(mc_lab.cluster_file)], capture_output=True, text=True,
                              timeout=120)
        assert heal.returncode == 0, heal.stdout + heal.stderr
        assert f"healed {left[0].id} (partition from run doomed)" in heal.stdout
        assert reach(mc_lab, "n2", "n3", timeout=5) == "connected"
        assert mc_lab.fleet.faults.in_place("n2") == []
        assert mc_lab.fleet.ledger.outstanding() == []
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(30)
        mc_lab.fleet.faults.heal_all(run=None)
