"""``python -m pytest_mooncake.toxiproxy`` as its own process: ready line, signals, flags."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys

import pytest
from toxi_net import connect, recv_exact, recv_to_eof

from pytest_mooncake.runtime.processes import log_matches
from pytest_mooncake.runtime.toxiproxy_process import api_request, toxiproxy_version

MODULE = [sys.executable, "-m", "pytest_mooncake.toxiproxy"]
READY = r"mc-toxiproxy ready: url=(http://127\.0\.0\.1:\d+) seed=(\d+)"


def start(mc_processes, *args: str):
    name = f"mc-toxiproxy-{len(mc_processes.processes)}"  # one log file each
    proc = mc_processes.start(name, [*MODULE, "--listen", "127.0.0.1:0", *args],
                              ready=log_matches(READY), ready_timeout=20)
    return proc, re.search(READY, proc.log_text()).group(1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(mc_processes, echo, sig) -> None:
    proc, url = start(mc_processes, "--seed", "7")
    assert re.search(READY, proc.log_text()).group(2) == "7"
    assert toxiproxy_version(url)
    status, body = api_request(url, "POST", "/proxies", {"name": "p", "upstream": echo.address,
                                                         "listen": "127.0.0.1:0"})
    assert status == 201
    with connect(body["listen"]) as proxied, socket.create_connection(
            ("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as keep_alive:
        keep_alive.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        assert keep_alive.recv(4096).startswith(b"HTTP/1.1 200")
        proxied.sendall(b"hi")
        assert recv_exact(proxied, 2) == b"hi"
        proc.send_signal(sig)
        assert proc.wait_exit(10) == 0
        assert recv_to_eof(proxied) == b"", "open connections are closed"
    log = proc.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log


def test_config_file_creates_proxies(mc_processes, echo, tmp_path) -> None:
    config = tmp_path / "toxiproxy.json"
    config.write_text(json.dumps([{"name": "cfg", "upstream": echo.address,
                                   "listen": "127.0.0.1:0"}]))
    proc, url = start(mc_processes, "--config", str(config))
    status, body = api_request(url, "GET", "/proxies")
    assert status == 200 and body["cfg"]["upstream"] == echo.address


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MODULE, *args], capture_output=True, text=True, timeout=30)


def test_non_loopback_listen_is_refused() -> None:
    result = run_cli("--listen", "0.0.0.0:0")
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr and "--allow-non-loopback" in result.stderr


def test_help_documents_every_flag() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in ("--listen", "--seed", "--allow-non-loopback", "--config", "--log-level",
                 "--version"):
        assert flag in result.stdout
    assert "cannot be seeded" in " ".join(result.stdout.split())


def test_allow_non_loopback_flag_lifts_the_refusal(mc_processes) -> None:
    far = {"name": "far", "upstream": "192.0.2.1:80", "listen": "127.0.0.1:0"}  # TEST-NET-1
    _, strict = start(mc_processes)
    assert api_request(strict, "POST", "/proxies", far)[0] == 400
    _, lenient = start(mc_processes, "--allow-non-loopback")
    status, body = api_request(lenient, "POST", "/proxies", far)  # no client, so no traffic
    assert status == 201 and body["upstream"] == "192.0.2.1:80"
