"""The run's Docker-API container engine, found or started like the run's etcd.

Where it comes from, first that applies:

1. ``DOCKER_HOST`` when set (an engine the operator runs; it must answer);
2. a Docker engine answering on ``/var/run/docker.sock``;
3. a Podman service this run starts (``podman_home``: its storage, settings and sockets in the
   plugin's cache, so images persist between runs), served through Podman's Docker API.

Whichever it is, a ``keeper`` process watches the run: when pytest ends, however it ends
(SIGKILL included), the keeper removes every container, network and volume labelled with this
session, and stops the Podman service it started. At start, what earlier runs left behind whose
owner and keeper both died is removed too (``labels.remove_orphans``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_mooncake.container_engine.labels import remove_orphans, remove_session, session_labels
from pytest_mooncake.container_engine.podman_home import PodmanHome, missing_tools, podman_dir
from pytest_mooncake.runtime.deadlines import Timeout, within

DOCKER_SOCKET = "/var/run/docker.sock"
START_TIMEOUT = 90.0


class EngineUnavailable(RuntimeError):
    """No container engine can be used here; the message says why and what to install."""


def _ping(url: str, timeout: float = 3.0) -> str | None:
    """None when the engine at ``url`` answers, else what happened."""
    try:
        import docker  # noqa: PLC0415 (optional dependency)
    except ImportError as exc:
        return f"the docker SDK is not installed ({exc}): pip install docker"
    try:
        client = docker.DockerClient(base_url=url, timeout=max(1, int(timeout)))
        within(timeout + 1, client.ping, what=f"docker ping {url}")
        return None
    except (Exception, Timeout) as exc:  # noqa: BLE001 (any failure: not usable)
        return f"{type(exc).__name__}: {exc}"


def probe() -> str | None:
    """Why no engine can be had here, or None (cheap: no engine is started)."""
    explicit = os.environ.get("DOCKER_HOST")
    if explicit:
        problem = _ping(explicit)
        return f"no Docker engine at DOCKER_HOST={explicit}: {problem}" if problem else None
    if os.path.exists(DOCKER_SOCKET) and _ping(f"unix://{DOCKER_SOCKET}") is None:
        return None
    tools = missing_tools()
    if tools:
        return (f"no container engine: DOCKER_HOST is not set, no Docker engine answers on "
                f"{DOCKER_SOCKET}, and Podman cannot be started: {tools}")
    try:
        import docker  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"the docker SDK is not installed ({exc}): pip install docker"
    return None


class ContainerEngine:
    """The run's engine and its keeper; ``client`` is a docker SDK client for it."""

    def __init__(self, session: str | None = None, api_timeout: float = 600.0):
        self.session = session or f"mc{os.getpid()}{secrets.token_hex(3)}"
        self.api_timeout = api_timeout
        self.url = ""
        self.how = ""
        self.client: Any = None
        self._keeper: subprocess.Popen | None = None
        self.home = PodmanHome()
        self.log_path = podman_dir() / "logs" / f"{self.session}.log"

    @property
    def labels(self) -> dict[str, str]:
        return session_labels(self.session)

    def start(self) -> ContainerEngine:
        reason = probe()
        if reason:
            raise EngineUnavailable(reason)
        import docker  # noqa: PLC0415

        explicit = os.environ.get("DOCKER_HOST")
        podman_socket = None
        if explicit:
            self.url, self.how = explicit, f"DOCKER_HOST={explicit}"
        elif os.path.exists(DOCKER_SOCKET) and _ping(f"unix://{DOCKER_SOCKET}") is None:
            self.url, self.how = f"unix://{DOCKER_SOCKET}", f"Docker at {DOCKER_SOCKET}"
        else:
            self.home.prepare()
            podman_socket = self.home.root / "sockets" / f"{self.session}.sock"
            podman_socket.parent.mkdir(parents=True, exist_ok=True)
            self.url = f"unix://{podman_socket}"
            self.how = f"Podman started by this run (storage {self.home.root})"
        self._start_keeper(podman_socket)
        self.client = docker.DockerClient(base_url=self.url, timeout=int(self.api_timeout))
        for problem in remove_orphans(self.client):
            print(f"pytest-mooncake: containers: could not remove an orphan: {problem}",
                  file=sys.stderr)
        return self

    def _start_keeper(self, podman_socket: Path | None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pytest_mooncake.container_engine.keeper",
                "--session", self.session, "--url", self.url]
        argv += ["--log", str(self.log_path)]
        if podman_socket is not None:
            argv += ["--podman", str(podman_socket)]
        with open(self.log_path, "ab") as log:
            self._keeper = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                    p for p in [str(Path(__file__).resolve().parents[2]),
                                os.environ.get("PYTHONPATH", "")] if p)})
        try:
            line = within(START_TIMEOUT, self._keeper.stdout.readline,
                          what="the container engine's keeper to report")
        except Timeout:
            line = b"failed no report within the deadline"
        text = line.decode(errors="replace").strip()
        if not text.startswith("ready"):
            self.close()
            raise EngineUnavailable(f"the container engine ({self.how}) did not start: "
                                    f"{text or 'the keeper exited'}; log {self.log_path}:\n"
                                    f"{self.log_text()[-2000:]}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> list[str]:
        """Remove the session's objects, then let the keeper stop (and stop its Podman)."""
        problems: list[str] = []
        if self.client is not None:
            try:
                problems = remove_session(self.client, self.session)
            except Exception as exc:  # noqa: BLE001 (the keeper tries again)
                problems = [f"removing session {self.session}: {exc}"]
            self.client.close()
            self.client = None
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stdin.close()
            try:
                keeper.wait(60)
            except subprocess.TimeoutExpired:
                keeper.kill()
                keeper.wait()
            keeper.stdout.close()
        return problems
