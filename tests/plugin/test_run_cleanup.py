"""A run leaves nothing behind: no process (etcd, redis-server, children), no etcd data
directory, no port claim, also when a test fails, on Ctrl-C and when pytest itself is SIGKILLed; a crashed xdist worker is an error
verdict of the requirements its test names.

Each inner run is a real pytest process with a private ``TMPDIR`` (its port claims live there)
and ``--basetemp``, and a marker variable in its environment that every process it starts
inherits, so what outlives the run is found in /proc by that marker.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_mooncake.runtime.deadlines import Timeout, wait_until

MARKER = "MC_CLEANUP_TEST_RUN"

HOLDING_SUITE = """
import os, pathlib, sys, time, pytest

@pytest.mark.parametrize("outcome", [{outcome!r}])
def test_holds(mc_etcd, mc_redis, mc_processes, outcome):
    mc_etcd.client().put("/k", "v")
    mc_redis.client().set("k", "v")
    mc_processes.start("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path(os.environ["READY_FILE"]).write_text(str(os.getpid()))
    if outcome == "wait":
        time.sleep(600)  # holds everything until the outer test signals the run
    assert outcome == "pass", "the failing run"
"""


class InnerRun:
    """One pytest process started on ``HOLDING_SUITE`` in a session of its own."""

    def __init__(self, pytester: pytest.Pytester, outcome: str, *args: str) -> None:
        self.marker = uuid.uuid4().hex
        self.tmp = pytester.path / "tmp"
        self.tmp.mkdir()
        self.basetemp = self.tmp / f"pytest-of-{getpass.getuser()}"  # pytest's default place
        self.ready = pytester.path / "ready"
        pytester.makepyfile(test_inner=HOLDING_SUITE.format(outcome=outcome))
        env = dict(os.environ, TMPDIR=str(self.tmp), PYTEST_DEBUG_TEMPROOT=str(self.tmp),
                   READY_FILE=str(self.ready), **{MARKER: self.marker})
        env.pop("PYTEST_ADDOPTS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_inner.py", *args],
            cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self) -> None:
        try:
            wait_until(lambda: self.ready.exists() or self.proc.poll() is not None, 120,
                       "the inner test to hold etcd and a child")
        except Timeout:
            self.proc.kill()
            raise
        assert self.ready.exists(), self.output()

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    def output(self) -> str:
        return self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""

    def survivors(self) -> list[str]:
        """Processes (not zombies) whose environment carries this run's marker."""
        needle = f"{MARKER}={self.marker}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if needle in environ and state != "Z":
                found.append(f"{entry}: {cmdline.decode(errors='replace')[:150]}")
        return found

    def etcd_data_dirs(self) -> list[Path]:
        return [p.parent for p in self.basetemp.rglob("member") if p.is_dir()]

    def port_claims(self) -> list[str]:
        claims = self.tmp / f"pytest-mooncake-port-locks-{os.getuid()}"
        return sorted(p.name for p in claims.iterdir()) if claims.exists() else []

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.basetemp.rglob("*") if p.is_file())


def _no_survivors(run: InnerRun, within: float) -> None:
    try:
        wait_until(lambda: not run.survivors(), within, "every process of the run to be gone")
    except Timeout:
        pytest.fail(f"processes outlived the run by {within:g} s: {run.survivors()}")


@pytest.mark.parametrize(("outcome", "code"), [("pass", 0), ("fail", 1)])
@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_finished_run_leaves_no_process_data_dir_or_port_claim(pytester, outcome, code,
                                                                   workers) -> None:
    run = InnerRun(pytester, outcome, *workers)
    assert run.finish() == code, run.output()
    _no_survivors(run, 0)
    assert run.etcd_data_dirs() == []
    assert run.port_claims() == []
    assert run.disk_bytes() < 1_000_000, f"{run.disk_bytes()} bytes left under {run.basetemp}"


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_ctrl_c_leaves_no_process_data_dir_or_port_claim(pytester, workers) -> None:
    run = InnerRun(pytester, "wait", *workers)
    run.wait_ready()
    assert run.etcd_data_dirs(), "the inner run holds no etcd data dir: the test proves nothing"
    assert run.port_claims()
    os.killpg(run.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    assert run.finish() == pytest.ExitCode.INTERRUPTED, run.output()
    _no_survivors(run, 0)
    assert run.etcd_data_dirs() == []
    assert run.port_claims() == []
    assert run.disk_bytes() < 1_000_000, f"{run.disk_bytes()} bytes left under {run.basetemp}"


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_sigkill_of_pytest_leaves_no_process_and_the_next_run_sweeps_the_rest(pytester,
                                                                             workers) -> None:
    run = InnerRun(pytester, "wait", *workers)
    run.wait_ready()
    held = run.port_claims()
    assert held and run.survivors()
    os.kill(run.proc.pid, signal.SIGKILL)  # pytest only (the controller under xdist)
    run.finish()
    _no_survivors(run, 3.0)
    # The claim files and etcd's data dir stay (nothing runs at SIGKILL), but their locks died
    # with their owner: the next session sweeps them.
    assert run.etcd_data_dirs(), "no etcd data dir left behind: the sweep below proves nothing"
    env = dict(os.environ, TMPDIR=str(run.tmp), PYTEST_DEBUG_TEMPROOT=str(run.tmp))
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q",
                    "test_inner.py"], cwd=pytester.path, env=env, check=True,
                   capture_output=True, timeout=300)  # a "no hang" bound: a loaded start is slow
    assert run.port_claims() == []
    assert run.etcd_data_dirs() == []
    assert run.disk_bytes() < 1_000_000, f"{run.disk_bytes()} bytes left under {run.basetemp}"


CRASHING_SUITE = """
import os, pytest

@pytest.mark.mc_req("MR-1")
def test_crashes_its_worker():
    os._exit(3)

@pytest.mark.mc_req("MR-1")
def test_passes_beside_it():
    pass

@pytest.mark.mc_req("MR-4")
def test_passes():
    pass
"""


def test_a_crashed_worker_is_an_error_verdict_and_fails_the_run(pytester) -> None:
    pytester.makepyfile(CRASHING_SUITE)
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:randomly", "--mc-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*worker 'gw0' crashed while running*test_crashes_its_worker*",
                                 "MR-1 *error*", "MR-4 *pass (1)*",
                                 "verdicts: 1 pass, 1 error"])
    doc = json.loads((pytester.path / "r.json").read_text())
    mr1 = doc["requirements"]["MR-1"]
    assert mr1["verdict"] == "error"
    crashed = next(t for t in mr1["tests"] if t["nodeid"].endswith("test_crashes_its_worker"))
    assert "crashed" in crashed.get("message", ""), crashed


def test_a_bug_in_a_service_start_still_closes_it(pytester) -> None:
    """An unexpected exception from ``start`` (not the service's own 'unavailable' error) used
    to skip ``close``: etcd ran on until the session end reaped it as a leak, its data dir and
    port claims stayed."""
    pytester.makepyfile("""
        import os
        from pytest_mooncake.runtime import etcd_process

        original = etcd_process.EtcdServer.start

        def start_then_fail(self):
            original(self)
            print("DATADIR", self.data_dir, flush=True)
            raise RuntimeError("a bug right after start")

        etcd_process.EtcdServer.start = start_then_fail

        def test_uses_etcd(mc_etcd):
            pass
    """)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*RuntimeError: a bug right after start*"])
    result.stdout.no_fnmatch_line("*teardown leak*")
    data_dir = Path(next(ln for ln in result.outlines if "DATADIR" in ln).split("DATADIR ")[1])
    assert not data_dir.exists()
