"""Processes a probe starts die with it: the group is stopped on exit, and a SIGKILL of the
probing process takes its children along (parent-death signal set before exec)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from pytest_mooncake.releases.procs import running, wait_until
from pytest_mooncake.releases.scratch_etcd import etcd_get, healthy, scratch_etcd


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_mooncake.releases.procs import spawn
    proc = spawn(["sleep", "300"], {"PATH": "/usr/bin:/bin"}, Path(sys.argv[1]))
    print(proc.pid, flush=True)
    time.sleep(300)
""")


def test_a_child_dies_when_the_probing_process_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: _gone(child), 10, f"child {child} to die with its parent")
    finally:
        parent.kill()
        parent.wait(10)


def test_leaving_running_stops_the_whole_group(tmp_path):
    with running(["bash", "-c", "sleep 300 & echo $!; wait"], os.environ, tmp_path / "log",
                 stdout=subprocess.PIPE) as proc:
        grandchild = int(proc.stdout.readline())
        assert not _gone(grandchild)
    wait_until(lambda: _gone(grandchild), 10, f"grandchild {grandchild} stopped")
    assert proc.poll() is not None


def test_scratch_etcd_serves_and_leaves_nothing():
    def scratch_dirs() -> set[Path]:  # where tempfile puts them ($TMPDIR), not always /tmp
        return {p for p in Path(tempfile.gettempdir()).glob("mc-release-etcd-*") if p.is_dir()}

    before = scratch_dirs()  # other runs on this machine may have theirs
    with scratch_etcd() as endpoint:
        assert healthy(endpoint)
        assert etcd_get(endpoint, "mooncake/ram/none") is None
        data_dirs = scratch_dirs() - before
        assert data_dirs
    assert not healthy(endpoint)
    assert not any(p.exists() for p in data_dirs)
