"""The process that outlives pytest long enough to clean up after it.

Started by ``session_engine.ContainerEngine`` in its own session (a Ctrl-C to pytest's process
group does not reach it) with a pipe on stdin. It starts the Podman service when asked (which
dies with the keeper), prints ``ready URL`` once the engine answers, then waits for stdin's end:
pytest closing it, exiting, or being SIGKILLed all end it. It then removes every container,
network and volume labelled with the session, stops the Podman service it started, and exits.

    python -m pytest_mooncake.container_engine.keeper --session S --url unix:///…/x.sock [--podman SOCKET]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_mooncake.container_engine.labels import remove_session
from pytest_mooncake.container_engine.podman_home import PodmanHome
from pytest_mooncake.runtime.die_with_parent import wrap

READY_TIMEOUT = 60.0


def _client(url: str, timeout: int = 60):
    import docker  # noqa: PLC0415 (the SDK is imported where it is used)

    return docker.DockerClient(base_url=url, timeout=timeout)


def _wait_answering(url: str, service: subprocess.Popen | None, deadline: float) -> str | None:
    last = "no answer yet"
    while time.monotonic() < deadline:
        if service is not None and service.poll() is not None:
            return f"podman system service exited with {service.returncode}"
        try:
            if _client(url, timeout=5).ping():
                return None
        except Exception as exc:  # noqa: BLE001 (not listening yet)
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    return f"the engine at {url} did not answer within {READY_TIMEOUT:.0f} s ({last})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_mooncake.container_engine.keeper")
    parser.add_argument("--session", required=True)
    parser.add_argument("--url", required=True, help="docker API URL of the engine")
    parser.add_argument("--podman", metavar="SOCKET",
                        help="start `podman system service` on this socket first")
    parser.add_argument("--log", help="the keeper's and Podman service's log file, removed "
                                      "when the session was cleaned up without a problem")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only stdin's end stops a keeper
    service = None
    if args.podman:
        home = PodmanHome().prepare()
        Path(args.podman).unlink(missing_ok=True)
        log = open(args.log or os.devnull, "ab")  # noqa: SIM115 (the service's whole life)
        service = subprocess.Popen(
            wrap(["podman", "system", "service", "--time=0", f"unix://{args.podman}"]),
            env=home.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    problem = _wait_answering(args.url, service, time.monotonic() + READY_TIMEOUT)
    print(f"failed {problem}" if problem else f"ready {args.url}", flush=True)
    clean = False
    if problem is None:
        while sys.stdin.buffer.read(65536):
            pass
        try:
            left = remove_session(_client(args.url, timeout=120), args.session)
            for line in left:
                print(f"left behind: {line}", file=sys.stderr, flush=True)
            clean = not left
        except Exception as exc:  # noqa: BLE001 (say it; the next run's orphan sweep retries)
            print(f"cleanup of session {args.session} failed: {exc}", file=sys.stderr, flush=True)
    if service is not None:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        Path(args.podman).unlink(missing_ok=True)
    if clean and args.log:
        Path(args.log).unlink(missing_ok=True)  # nothing to tell: the run leaves no file
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main())
