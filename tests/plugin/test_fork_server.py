"""Forked Python children (runtime/fork_server.py): a forked ``python -m`` child is the process a
new interpreter would have been (argv, environment, directory, log, exit status, its own
session, signals), dies with its server, and anything the server cannot run the same way is
exec'd as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mooncake.runtime.deadlines import wait_until
from pytest_mooncake.runtime.fork_server import ForkedChild, ForkServers
from pytest_mooncake.runtime.processes import (
    ManagedProcess,
    log_matches,
    spawn_popen,
    use_fork_servers,
)

TOY = """\
import os, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "flavour", os.environ.get("FLAVOUR"),
      "main", __name__, "sid", os.getsid(0) == os.getpid(), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(600)
if sys.argv[1] == "raise":
    raise ValueError("planted")
sys.exit(int(sys.argv[1]))
"""

THREADED = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"


@pytest.fixture
def toy(tmp_path: Path):
    """A package ``toypkg`` on PYTHONPATH and fork servers that import it; restored after."""
    root = tmp_path / "lib"
    (root / "toypkg").mkdir(parents=True)
    (root / "toypkg" / "__init__.py").write_text("")
    (root / "toypkg" / "__main__.py").write_text(TOY)
    (root / "threadpkg").mkdir()
    (root / "threadpkg" / "__init__.py").write_text(THREADED)
    (root / "threadpkg" / "__main__.py").write_text(TOY)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "FLAVOUR": "forked"}
    servers = ForkServers(["toypkg"], spawn_popen)
    before = use_fork_servers(servers)
    try:
        yield env, servers
    finally:
        use_fork_servers(before)
        servers.close()


def start(name: str, args: list[str], env: dict, tmp_path: Path, **kw) -> ManagedProcess:
    proc = ManagedProcess(name, [sys.executable, "-m", "toypkg", *args], tmp_path / f"{name}.log",
                          env=env, cwd=tmp_path, **kw)
    return proc.start()


def test_a_forked_child_runs_as_a_new_interpreter_would(toy, tmp_path):
    env, servers = toy
    proc = start("exits", ["3", "x"], env, tmp_path)
    assert isinstance(proc.popen, ForkedChild), "not forked"
    assert proc.wait_exit(30) == 3
    assert proc.terminate() == 3 and proc.reaped()
    log = proc.log_text()
    assert "(forked)" in log
    assert (f"argv ['3', 'x'] cwd {tmp_path} flavour forked main __main__ sid True") in log, log
    server = servers.for_child(proc.argv, env)
    assert server is not None and server.pid != os.getpid()


def test_an_exception_is_a_traceback_and_status_1(toy, tmp_path):
    env, _ = toy
    proc = start("raises", ["raise"], env, tmp_path)
    assert proc.wait_exit(30) == 1
    assert "ValueError: planted" in proc.log_text()
    proc.terminate()


def test_signals_reach_the_forked_child_and_its_status_says_so(toy, tmp_path):
    env, _ = toy
    proc = start("sleeps", ["sleep"], env, tmp_path, ready=log_matches("argv"))
    assert proc.alive()
    assert proc.terminate() == -signal.SIGTERM
    assert not proc.alive() and proc.group_members() == []


def test_the_children_die_with_their_server(toy, tmp_path):
    env, servers = toy
    proc = start("orphan", ["sleep"], env, tmp_path, ready=log_matches("argv"))
    pid = proc.pid
    server = servers.for_child(proc.argv, env)
    os.kill(server.pid, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 30,
               "the child of a killed fork server to die")
    assert proc.terminate() == -signal.SIGKILL  # the server is gone: what is known is that


def test_what_a_server_cannot_run_the_same_way_is_execd(toy, tmp_path):
    """Another interpreter setting (PYTHONPATH), a module it did not import, a program that is
    not Python: each is started as a new process, as without fork servers."""
    env, servers = toy
    other = {**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(tmp_path)}
    proc = start("other-path", ["0"], other, tmp_path)
    assert isinstance(proc.popen, ForkedChild), "a second server serves the other PYTHONPATH"
    proc.terminate()
    plain = ManagedProcess("plain", ["sh", "-c", "exit 4"], tmp_path / "plain.log", env=env).start()
    assert isinstance(plain.popen, subprocess.Popen)
    assert plain.wait_exit(30) == 4
    plain.terminate()
    threaded = ManagedProcess("threaded", [sys.executable, "-m", "threadpkg", "5"],
                              tmp_path / "threaded.log", env=env).start()
    assert isinstance(threaded.popen, subprocess.Popen), "threadpkg is not among its modules"
    threaded.terminate()


def test_a_server_with_threads_refuses_to_fork_and_the_child_is_execd(tmp_path, toy):
    env, _ = toy
    servers = ForkServers(["threadpkg"], spawn_popen)
    before = use_fork_servers(servers)
    try:
        proc = ManagedProcess("threaded", [sys.executable, "-m", "threadpkg", "6"],
                              tmp_path / "t.log", env=env).start()
        assert isinstance(proc.popen, subprocess.Popen)
        assert proc.wait_exit(30) == 6
        proc.terminate()
        assert servers.refusals and "threads after importing threadpkg" in servers.refusals[0]
    finally:
        use_fork_servers(before)
        servers.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_server_that_cannot_import_its_modules_says_so(tmp_path):
    servers = ForkServers(["no_such_module_here"], spawn_popen)
    try:
        assert servers.for_child([sys.executable, "-m", "no_such_module_here"], dict(os.environ)) is None
        assert "before it was ready" in servers.refusals[0], servers.refusals
    finally:
        servers.close()

