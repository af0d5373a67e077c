"""The process supervisor: readiness, stop, kill, restart, reaping after failures and Ctrl-C."""

import os
import re
import signal
import sys
import time

import pytest

from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.runtime.processes import (
    ManagedProcess,
    ProcessStartError,
    Supervisor,
    log_matches,
    port_open,
)

SERVER = [sys.executable, "-c", (
    "import socket,sys,signal,time\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('listening', flush=True)\n"
    "while True: time.sleep(1)\n"
)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_ready_probe_stop_and_restart(mc_processes: Supervisor) -> None:
    port = free_port()
    proc = mc_processes.start("server", SERVER + [str(port)], ready=port_open(port))
    assert proc.alive()
    first = proc.pid
    proc.restart()
    assert proc.alive() and proc.pid != first
    assert not _pid_alive(first)
    assert proc.log_text().splitlines().count("listening") == 2
    assert proc.terminate() is not None
    assert not proc.alive()


def test_kill_minus_nine_is_reaped(mc_processes: Supervisor) -> None:
    proc = mc_processes.start("sleeper", ["sleep", "60"])
    pid = proc.pid
    proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not _pid_alive(pid)


def test_child_exiting_before_ready_is_reported(mc_processes: Supervisor) -> None:
    with pytest.raises(ProcessStartError, match=r"(?s)exited with 3 before it was ready.*boom"):
        mc_processes.start("crasher", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
                           ready=log_matches("never"))


def test_ready_deadline_kills_the_child(tmp_path) -> None:
    proc = ManagedProcess("slow", ["sleep", "60"], tmp_path / "slow.log",
                          ready=log_matches("never"), ready_timeout=0.3)
    with pytest.raises(ProcessStartError, match="not ready .* within"):
        proc.start()
    assert not proc.alive()


def test_sigterm_ignorer_is_killed(mc_processes: Supervisor) -> None:
    proc = mc_processes.start(
        "stubborn",
        [sys.executable, "-c",
         "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True)\n"
         "while True: time.sleep(1)"],
        ready=log_matches("^up$"), stop_timeout=0.5,
    )
    assert proc.terminate() == -signal.SIGKILL


def test_grandchildren_die_with_the_group(mc_processes: Supervisor) -> None:
    proc = mc_processes.start(
        "wrapper",
        ["bash", "-c", "sleep 60 & echo child=$! ; wait"],
        ready=log_matches(r"^child=\d+$"),
    )
    child = int(re.search(r"^child=(\d+)$", proc.log_text(), re.M).group(1))
    assert _pid_alive(child)
    proc.kill()
    deadline = time.monotonic() + 5
    while _pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _pid_alive(child)


def test_processes_are_reaped_after_a_failing_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_fails(mc_processes):
            p = mc_processes.start("sleeper", ["sleep", "60"])
            print("CHILDPID", p.pid)
            assert False
    """)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Captured process logs*"])
    pid = int(next(ln for ln in result.outlines if "CHILDPID" in ln).split("CHILDPID")[1].split()[0])
    assert not _pid_alive(pid)


def test_leaked_process_is_an_error_at_session_end(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from pytest_mooncake.runtime.processes import Supervisor
        LEAK = []
        def test_leaks(tmp_path):
            LEAK.append(Supervisor(tmp_path).start("leaky", ["sleep", "60"]))
            print("CHILDPID", LEAK[0].pid)
    """)
    result = pytester.runpytest_subprocess("-s")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ERROR mooncake: leaky (pid *) was still alive at session end*"])
    pid = int(next(ln for ln in result.outlines if "CHILDPID" in ln).split("CHILDPID")[1].split()[0])
    assert not _pid_alive(pid)


def test_ctrl_c_reaps_children(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import os, signal
        def test_interrupted(mc_processes):
            p = mc_processes.start("sleeper", ["sleep", "60"])
            print("CHILDPID", p.pid, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
    """)
    result = pytester.runpytest_subprocess("-s")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    pid = int(next(ln for ln in result.outlines if "CHILDPID" in ln).split("CHILDPID")[1].split()[0])
    assert not _pid_alive(pid)


def test_child_dies_when_the_test_process_is_killed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import os, signal
        def test_killed(mc_processes):
            p = mc_processes.start("sleeper", ["sleep", "60"])
            print("CHILDPID", p.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = pytester.runpytest_subprocess("-s")
    pid = int(next(ln for ln in result.outlines if "CHILDPID" in ln).split("CHILDPID")[1].split()[0])
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _pid_alive(pid), "PR_SET_PDEATHSIG should kill the child with its parent"


def test_child_started_from_a_short_lived_thread_survives_it(mc_processes: Supervisor) -> None:
    import threading

    box = {}
    thread = threading.Thread(target=lambda: box.update(p=mc_processes.start("from-thread", ["sleep", "60"])))
    thread.start()
    thread.join(10)
    proc = box["p"]
    assert proc.wait_exit(0.5) is None, "PR_SET_PDEATHSIG fired when the starting thread exited"
    assert proc.alive()


def test_descendants_of_a_leader_that_exited_are_killed(mc_processes: Supervisor) -> None:
    """The leader exits at once and leaves a grandchild in its group: stop_all still kills it
    (before the fix a group whose leader was gone was skipped)."""
    proc = mc_processes.start("forker", ["sh", "-c", "sleep 600 & echo $! ; exit 0"],
                              ready=log_matches(r"^\d+$"))
    grandchild = int(re.findall(r"^(\d+)$", proc.log_text(), re.M)[-1])
    assert proc.wait_exit(30) == 0
    assert proc.group_members() == [grandchild]
    mc_processes.stop_all()
    assert not _pid_alive(grandchild)
    assert proc.reaped() and proc.group_members() == []


def test_a_leader_that_exited_is_not_reaped_before_its_group_is_killed(mc_processes) -> None:
    """Until the group is killed the leader stays a zombie, so its pid (the group id) cannot be
    given to another process that a later killpg would hit."""
    proc = mc_processes.start("quitter", ["sh", "-c", "exit 5"])
    assert proc.wait_exit(30) == 5
    with open(f"/proc/{proc.pid}/stat") as f:
        assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
    assert proc.returncode == 5 and not proc.reaped()
    assert proc.terminate() == 5 and proc.reaped()
    assert not os.path.exists(f"/proc/{proc.pid}") or _stat_state(proc.pid) != "Z"


def _stat_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_leaked_group_of_an_exited_leader_is_an_error_at_session_end(pytester) -> None:
    pytester.makepyfile("""
        import re
        from pytest_mooncake.runtime.processes import Supervisor, log_matches
        LEAK = []
        def test_leaks(tmp_path):
            p = Supervisor(tmp_path).start("forker", ["sh", "-c", "sleep 600 & echo $!"],
                                           ready=log_matches(r"^\\d+$"))
            LEAK.append(p)
            print("GRANDCHILD", re.findall(r"^(\\d+)$", p.log_text(), re.M)[-1])
    """)
    result = pytester.runpytest_subprocess("-s")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ERROR mooncake: forker (pid *) exited, but its process group "
                                 "still ran pids * at session end*"])
    pid = int(next(ln for ln in result.outlines if "GRANDCHILD" in ln).split()[-1])
    assert not _pid_alive(pid)


def test_children_start_without_python_between_fork_and_exec(mc_processes, monkeypatch) -> None:
    """preexec_fn runs Python in the forked child, unsafe with threads in the parent; the
    parent-death signal comes from the exec wrapper instead."""
    seen = {}
    real_popen = __import__("subprocess").Popen

    def spy(argv, **kwargs):
        seen.update(kwargs, argv=argv)
        return real_popen(argv, **kwargs)

    monkeypatch.setattr("subprocess.Popen", spy)
    proc = mc_processes.start("sleeper", ["sleep", "60"])
    assert seen.get("preexec_fn") is None
    assert "die-with-parent" in seen["argv"][0] or "PR_SET_PDEATHSIG" in " ".join(seen["argv"])
    from pytest_mooncake.runtime.deadlines import wait_until

    def program() -> bytes:
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0]

    wait_until(lambda: program() == b"sleep", 30, "the wrapper to exec the program")


def test_a_stuck_spawner_gives_an_error_and_kills_the_late_child(monkeypatch) -> None:
    import subprocess
    import threading

    from pytest_mooncake.runtime import processes
    from pytest_mooncake.runtime.deadlines import wait_until

    spawner = processes._Spawner()
    spawner.popen(["true"]).wait()  # the spawner thread exists
    gate = threading.Event()
    spawner._executor.submit(gate.wait, 60)  # now it is busy
    started = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    with pytest.raises(ProcessStartError, match="did not return within 0.2 s"):
        spawner.popen(["sleep", "600"], timeout=0.2, start_new_session=True)
    assert started == []
    gate.set()
    late = wait_until(lambda: started and started[0], 30, "the late child to start")
    wait_until(lambda: late.returncode is not None, 30, "the late child to be killed and reaped")
    assert late.returncode == -signal.SIGKILL
