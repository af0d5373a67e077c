"""``lab up`` / ``lab down`` leave nothing behind: no namespace, link, process, rule or file,
also after faults were applied, and also when the builder was SIGKILLed half-way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_mooncake.lab import host, network
from pytest_mooncake.lab.fixture import lab_name
from pytest_mooncake.lab.layout import state_root
from pytest_mooncake.lab.netns_lab import Lab, down, known_labs, read_state, sweep_stale

pytestmark = pytest.mark.skipif(bool(host.probe()), reason=host.probe() or "")


def lab_processes(subnet_prefix: str) -> list[str]:
    """Processes whose command line names one of the lab's addresses (etcd, engines, masters)."""
    out = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,stat=,args="], capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines()
            if subnet_prefix in line and " Z" not in line and "ps -A" not in line]


def assert_gone(name: str, subnet_prefix: str) -> None:
    assert network.leftovers(name).namespaces == []
    assert network.leftovers(name).links == []
    assert network.leftovers(name).firewall == []
    assert name not in network.firewall_tables()
    assert not (state_root() / name).exists()
    assert name not in known_labs()
    assert lab_processes(subnet_prefix) == []


def release_flavour(release: str) -> str:
    """``release`` when its environment is installed here (scripts/setup.sh installs it);
    else the test is skipped saying so (failed under CI=true, where setup ran)."""
    from pytest_mooncake.releases.envs import find_env

    if find_env(release) is None:
        reason = (f"Mooncake {release} has no cached environment here (python -m "
                  f"pytest_mooncake.releases install {release})")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return release


@pytest.mark.parametrize("flavour", ["reference", "0.3.13.post1"])
def test_up_then_down_leaves_nothing(flavour):
    if flavour != "reference":
        release_flavour(flavour)
    name = lab_name("u")
    lines: list[str] = []
    lab = Lab.up(nodes=2, name=name, masters=1, flavour=flavour, owner_pid=os.getpid(),
                 progress=lines.append)
    try:
        prefix = str(lab.layout.subnet.network_address)[:-1]  # "198.18.k."
        plan = lab.plan
        started = plan.etcd + plan.services + plan.masters + plan.engines + plan.clients
        assert len(started) == 8, "etcd, Toxiproxy, a master, three engines, two clients"
        running = lab_processes(prefix)
        assert len(running) >= len(started), running
        pids = [p for ns in network.leftovers(name).namespaces for p in host.netns_pids(ns)]
        fleet = lab.fleet
        fleet.faults.partition("n2", ["n1"])
        fleet.node("n2").pause("engine-seg-b")
        ledger = fleet.ledger.path
    finally:
        problems = lab.down(progress=lines.append)
    assert problems == []
    assert_gone(name, prefix)
    assert not ledger.exists()
    assert [p for p in pids if os.path.exists(f"/proc/{p}/stat") and
            open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"] == []
    assert any("down in" in line for line in lines)


@contextmanager
def controller(name: str, argv: list[str], **popen: object) -> Iterator[subprocess.Popen]:
    """A process that builds lab ``name`` (in its own session); whatever the test does, it is
    killed and the lab removed afterwards."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, **popen}
    proc = subprocess.Popen([sys.executable, *argv], start_new_session=True, **popen)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        down(name, progress=lambda _: None)


def wait_for_sshd(name: str, proc: subprocess.Popen, deadline: float) -> str:
    """Until the lab's sshds run (namespaces, links, processes and files all exist then);
    returns the lab's address prefix."""
    while not any((state_root() / name / n / "sshd.pid").exists() for n in ("n1", "n2")):
        assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the builder never got to sshd"
        time.sleep(0.02)
    return read_state(name)["subnet"].rsplit(".", 1)[0] + "."  # type: ignore[index]


def up_argv(name: str) -> list[str]:
    return ["-m", "pytest_mooncake.lab", "up", "--nodes", "2", "--name", name, "--masters", "0"]


def test_down_removes_a_lab_whose_builder_was_killed():
    name = lab_name("k")
    with controller(name, up_argv(name)) as builder:
        prefix = wait_for_sshd(name, builder, time.monotonic() + 60)
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait(30)
        assert read_state(name)["status"] == "building"  # type: ignore[index]
        assert network.leftovers(name)
        done = subprocess.run([sys.executable, "-m", "pytest_mooncake.lab", "down", "--name", name],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert_gone(name, prefix)


def test_an_interrupted_up_removes_what_it_built():
    name = lab_name("i")
    with controller(name, up_argv(name)) as builder:
        prefix = wait_for_sshd(name, builder, time.monotonic() + 60)
        os.kill(builder.pid, signal.SIGINT)  # Ctrl-C
        out = builder.communicate(timeout=60)[0].decode()
        assert builder.returncode == 130, out
        assert "build failed or interrupted; removing what was built" in out
        assert_gone(name, prefix)


SESSION = """
import os, sys
from pytest_mooncake.lab.netns_lab import Lab
Lab.up(nodes=1, name=sys.argv[1], masters=0, engines=False, owner_pid=os.getpid())
print("up", flush=True)
sys.stdin.read()
"""


def test_the_next_session_sweeps_the_lab_of_a_killed_one():
    name = lab_name("s")
    with controller(name, ["-c", SESSION, name], stdin=subprocess.PIPE,
                    stderr=subprocess.DEVNULL) as session:
        assert session.stdout.readline() == b"up\n"  # type: ignore[union-attr]
        prefix = read_state(name)["subnet"].rsplit(".", 1)[0] + "."  # type: ignore[index]
        os.killpg(session.pid, signal.SIGKILL)
        session.wait(30)
        assert network.leftovers(name) and read_state(name)["status"] == "up"  # type: ignore[index]
        assert name in sweep_stale(progress=lambda _: None)
        assert_gone(name, prefix)


def test_tear_down_kills_what_names_the_lab_outside_its_namespaces(tmp_path, monkeypatch):
    """An sshd that daemonized while an interrupted ``up`` was cleaning up ran on after its
    namespace was deleted (seen: ``sshd -f /run/pytest-mooncake-lab/i1a/n2/sshd_config``, an
    hour later): tear_down also kills what names the lab's directory."""
    monkeypatch.setenv("MC_LAB_DIR", str(tmp_path))
    name = lab_name("o")
    config = tmp_path / name / "n2" / "sshd_config"
    config.parent.mkdir(parents=True)
    config.write_text("")
    stray = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(600)",
                              str(config)], start_new_session=True)
    try:
        assert network.tear_down(name) == []
        assert stray.wait(timeout=10) is not None
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()
