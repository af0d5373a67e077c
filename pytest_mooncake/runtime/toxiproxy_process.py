"""The Toxiproxy server network faults go through, as a child process or an external one.

``EmbeddedToxiproxy`` runs the plugin's own Toxiproxy-compatible server (``python -m
pytest_mooncake.toxiproxy``) on a loopback port it picks itself; ``ExternalToxiproxy`` is a real
Toxiproxy given by URL (``--mc-toxiproxy``), checked and never stopped. ``api_request`` is one
call to either's HTTP API. The ``mc_toxiproxy`` fixture (``fixtures/network_faults.py``)
chooses between them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.loopback_http import http_request, json_body
from pytest_mooncake.runtime.processes import ManagedProcess, ProcessStartError

READY_TIMEOUT = 20.0
EXTERNAL_CHECK_TIMEOUT = 5.0
_READY_LINE = re.compile(r"mc-toxiproxy ready: url=(http://127\.0\.0\.1:\d+)")


class ToxiproxyUnavailable(RuntimeError):
    """The Toxiproxy server could not be started or reached; the message says why."""


def api_request(url: str, method: str, path: str, body: Any = None,
                timeout: float = 5.0) -> tuple[int, Any]:
    """One call to a Toxiproxy API: (status, decoded JSON body or None)."""
    answer = http_request(method, url + path, json_body(body), timeout=timeout)
    try:
        return answer.status, answer.json() if answer.body.strip() else None
    except ValueError:
        return answer.status, answer.text


def toxiproxy_version(url: str, timeout: float = 0.5) -> str | None:
    """The version a Toxiproxy server at ``url`` reports, or None if it does not answer."""
    try:
        status, body = api_request(url, "GET", "/version", timeout=timeout)
    except (OSError, ValueError):
        return None
    if status != 200 or not isinstance(body, dict):
        return None
    return str(body.get("version", ""))


class EmbeddedToxiproxy:
    """The plugin's own server in a child process, on a port it picks itself (no race)."""

    owned = True

    def __init__(self, log_path: Path, seed: int, ready_timeout: float = READY_TIMEOUT):
        self.url = ""
        self.seed = seed
        argv = [sys.executable, "-m", "pytest_mooncake.toxiproxy",
                "--listen", "127.0.0.1:0", "--seed", str(seed)]
        root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = ManagedProcess("mc-toxiproxy", argv, log_path,
                                      env=dict(os.environ, PYTHONPATH=path),
                                      ready=self._ready, ready_timeout=ready_timeout)

    def _ready(self, proc: ManagedProcess) -> bool:
        match = _READY_LINE.search(proc.log_text())
        if match is None:
            return False
        self.url = match.group(1)
        return toxiproxy_version(self.url) is not None

    _ready.__doc__ = "prints its ready line and answers GET /version"

    def start(self) -> EmbeddedToxiproxy:
        try:
            self.process.start()
        except ProcessStartError as exc:
            raise ToxiproxyUnavailable(f"embedded Toxiproxy server did not start: {exc}") \
                from None
        return self

    def close(self) -> None:
        self.process.terminate()

    def alive(self) -> bool:
        return self.process.alive()

    def log_text(self) -> str:
        return self.process.log_text()


class ExternalToxiproxy:
    """A Toxiproxy given with ``--mc-toxiproxy=URL``: used, never started or stopped."""

    owned = False

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.process = None

    def check(self, timeout: float = EXTERNAL_CHECK_TIMEOUT) -> None:
        try:
            wait_until(lambda: toxiproxy_version(self.url) is not None, timeout,
                       f"{self.url} to answer GET /version", interval=0.1, max_interval=0.1)
        except Timeout:
            raise ToxiproxyUnavailable(
                f"--mc-toxiproxy={self.url}: no answer to GET /version within "
                f"{timeout:.0f}s; check that Toxiproxy runs there, or omit --mc-toxiproxy "
                f"to use the embedded server") from None

    def close(self) -> None:
        pass

    def alive(self) -> bool:
        return toxiproxy_version(self.url) is not None

    def log_text(self) -> str:
        return f"(external Toxiproxy at {self.url}: no log)"


