"""How a component process of the family is started and reached: on this host
(``LocalLauncher``) or in a container (``docker_placement.ContainerLauncher``). Engine, master
and store-client handles take one of these strategy objects at construction and never ask which
one they have; a placement (``adapter.Placement``) hands its launcher to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess, ReadyProbe, Supervisor
from pytest_mooncake.targets.mooncake.install import MooncakeInstall


class Launcher(Protocol):
    bind_host: str
    """Address components listen on for what the test process reaches (control, admin)."""
    master_rpc_flags: Sequence[str]
    """Flags that give a master a reachable RPC address."""
    control_port: int
    """Port a driver's control socket listens on (0: any, reported in its ready file)."""
    version: str

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: ReadyProbe | None, ready_timeout: float,
              publish: Sequence[int] = ()) -> ManagedProcess: ...
    def host_port(self, process: Any, port: int) -> int:
        """The port on 127.0.0.1 of this host where ``port`` of ``process`` is reachable."""
        ...
    def environment(self, extra: Mapping[str, str]) -> Mapping[str, str]:
        """The environment a process started with ``env=extra`` runs with."""
        ...
    def driver_argv(self, *args: str) -> list[str]: ...
    def master_binary(self) -> str: ...
    def host_name(self, name: str) -> str:
        """The host name other components use to reach the component called ``name``."""
        ...
    def port(self) -> int: ...
    def release(self, port: int) -> None: ...


class LocalLauncher:
    """Processes on this host, under the session's ``Supervisor``, bound to loopback."""

    bind_host = "127.0.0.1"
    master_rpc_flags = ("--rpc_address=127.0.0.1",)
    control_port = 0

    def __init__(self, install: MooncakeInstall, supervisor: Supervisor, master_binary: str = ""):
        self.install = install
        self.supervisor = supervisor
        self._master = master_binary

    @property
    def version(self) -> str:
        return self.install.version

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: ReadyProbe | None, ready_timeout: float,
              publish: Sequence[int] = ()) -> ManagedProcess:
        return self.supervisor.start(name, argv, env=self.install.env(dict(env or {})),
                                     ready=ready, ready_timeout=ready_timeout)

    def host_port(self, process: Any, port: int) -> int:
        return port

    def environment(self, extra: Mapping[str, str]) -> Mapping[str, str]:
        return self.install.env(dict(extra))

    def driver_argv(self, *args: str) -> list[str]:
        return self.install.driver_argv(*args)

    def master_binary(self) -> str:
        return self._master

    def host_name(self, name: str) -> str:
        return "127.0.0.1"

    def port(self) -> int:
        return free_port()

    def release(self, port: int) -> None:
        release_port(port)
