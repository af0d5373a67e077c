"""One container engine, session network, etcd container and set of relays per test process,
shared by every docker target of the run.

A run may open several docker targets: the session's (``--mc-target=docker:IMAGE``) and skew
roles of other images (a rolling upgrade from ``localhost/mooncake:0.3.13.post1`` to ``:0.3.14``
containers). Their components must reach one another and find each other's descriptors, so they
share one internal network and one etcd: each target acquires the process's ``ContainerRun``
and releases it at close; the last release removes the network and containers and stops the
engine (Podman) the first acquire started. Each target still runs its own image.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_mooncake.container_engine.session_engine import ContainerEngine
from pytest_mooncake.container_engine.tcp_relay import TcpRelay


class ContainerRun:
    """The shared part: the engine, the lab (made by ``make_lab`` at first use), the relays."""

    def __init__(self, engine: ContainerEngine):
        self.engine = engine
        self.lab: Any = None
        self.relays: dict[tuple[str, str], TcpRelay] = {}
        self.users = 0

    def lab_for(self, workdir: Path, make_lab: Callable[[], Any]) -> Any:
        """The run's lab (made once), with ``workdir`` bind-mounted into later containers."""
        if self.lab is None:
            self.lab = make_lab()
        self.lab.share(workdir)
        return self.lab

    def relay(self, address: str, listen_host: str) -> str:
        """Where ``listen_host`` reaches ``address``: one relay per pair for every target, so
        two targets' metadata handles name the same address."""
        key = (address, listen_host)
        if key not in self.relays:
            host, _, port = address.rpartition(":")
            self.relays[key] = TcpRelay(listen_host, (host, int(port)))
        return self.relays[key].address

    def close(self) -> None:
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()
        if self.lab is not None:
            self.lab.close()
            self.lab = None
        self.engine.close()


_lock = threading.Lock()
_current: ContainerRun | None = None


def acquire(api_timeout: float) -> ContainerRun:
    """The process's run, starting its engine (``EngineUnavailable`` when there is none)."""
    global _current
    with _lock:
        if _current is None:
            _current = ContainerRun(ContainerEngine(api_timeout=api_timeout).start())
        _current.users += 1
        return _current


def release(run: ContainerRun) -> None:
    """One target is done with ``run``; the last one closes it."""
    global _current
    with _lock:
        run.users -= 1
        if run.users > 0:
            return
        if _current is run:
            _current = None
    run.close()
