"""Port claims: exclusive between processes, gone with their owner (normal exit, SIGKILL), and
drawn where the kernel never hands out ports on its own, so a server restarted on its old
port finds it free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_mooncake.runtime import ports

CLAIMER = textwrap.dedent("""
    import sys
    from pytest_mooncake.runtime.ports import free_port
    print(*[free_port() for _ in range(int(sys.argv[1]))], flush=True)
    if sys.argv[2] == "hold":
        sys.stdin.read()
""")


def _claimer(tmp_path: Path, count: int, mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A process of its own that claims ``count`` ports (its claims dir under ``tmp_path``)."""
    proc = subprocess.Popen([sys.executable, "-c", CLAIMER, str(count), mode],
                            env=dict(os.environ, TMPDIR=str(tmp_path)), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return proc, [int(p) for p in proc.stdout.readline().split()]


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's claims dir, the one a ``_claimer`` under ``tmp_path`` uses."""
    directory = tmp_path / f"pytest-mooncake-port-locks-{os.getuid()}"
    monkeypatch.setattr(ports, "_CLAIMS", directory)
    return directory


def test_ports_come_from_below_the_kernels_ephemeral_range() -> None:
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = [ports.free_port() for _ in range(20)]
    try:
        assert all(ports.LOWEST_PORT <= p < ephemeral_low for p in picked), picked
    finally:
        for p in picked:
            ports.release_port(p)


def test_a_claim_is_exclusive_until_its_owner_dies_even_by_sigkill(tmp_path, claims) -> None:
    proc, held = _claimer(tmp_path, 3, "hold")
    try:
        assert sorted(int(p.name) for p in claims.iterdir()) == sorted(held)
        assert not any(ports.claim_port(p) for p in held), "another process's claim was taken"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    for port in held:  # no expiry to wait for: the lock died with its owner
        assert ports.claim_port(port)
        ports.release_port(port)
    assert list(claims.iterdir()) == []


def test_claims_are_removed_when_their_owner_exits(tmp_path, claims) -> None:
    proc, held = _claimer(tmp_path, 5, "exit")
    assert proc.wait(30) == 0 and len(held) == 5
    assert list(claims.iterdir()) == []


def test_stale_claims_of_a_killed_owner_are_swept(tmp_path, claims) -> None:
    proc, held = _claimer(tmp_path, 4, "hold")
    mine = ports.free_port()
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert ports.sweep_stale_claims() == 4
    assert [p.name for p in claims.iterdir()] == [str(mine)], "a live claim was swept"
    ports.release_port(mine)
    assert list(claims.iterdir()) == []


def test_release_leaves_a_claim_of_someone_else_alone(tmp_path, claims) -> None:
    proc, held = _claimer(tmp_path, 1, "hold")
    try:
        ports.release_port(held[0])
        assert (claims / str(held[0])).exists()
        assert not ports.claim_port(held[0])
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_a_released_port_stays_free_while_outgoing_connections_churn() -> None:
    """The restart-on-the-same-port case: while a server is down, the kernel gives outgoing
    connections local ports from its ephemeral range only, never the claimed one."""
    import socket

    port = ports.free_port()
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(512)
            target = server.getsockname()
            seen = set()
            for _ in range(300):
                with socket.create_connection(target) as client:
                    seen.add(client.getsockname()[1])
                    conn, _ = server.accept()
                    conn.close()
        assert port not in seen
        assert ports._bindable("127.0.0.1", port)
    finally:
        ports.release_port(port)


@pytest.mark.parametrize("raw", ["abc", "30000", "900-2000", "40000-30000", "20000-70000"])
def test_a_bad_port_range_names_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv(ports.RANGE_ENV, raw)
    with pytest.raises(ports.PortRangeError, match=f"{ports.RANGE_ENV}={raw!r}: expected LOW-HIGH"):
        ports.free_port()


def test_the_port_range_can_be_chosen(monkeypatch) -> None:
    monkeypatch.setenv(ports.RANGE_ENV, "23000-23099")
    port = ports.free_port()
    ports.release_port(port)
    assert 23000 <= port <= 23099


def test_a_forked_child_neither_holds_nor_removes_the_parents_claims(claims) -> None:
    port = ports.free_port()
    try:
        pid = os.fork()
        if pid == 0:  # the child: releases "all" it holds, then leaves without atexit
            ports.release_all()
            os._exit(0 if ports.held_ports() == [] else 1)
        assert os.waitpid(pid, 0)[1] == 0
        assert (claims / str(port)).exists()
        assert not ports.claim_port(port) or pytest.fail("the child released the parent's lock")
    finally:
        ports.release_port(port)
