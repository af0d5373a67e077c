"""How a component process of the family is started and reached: on this host
(``LocalLauncher``) or in a container (``placements/containers.ContainerLauncher``). Engine, master
and store-client handles take one of these strategy objects at construction and never ask which
one they have; a placement (``adapter.Placement``) hands its launcher to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pytest_mooncake.releases import ReleaseFacts
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess, ReadyProbe, Supervisor
from pytest_mooncake.targets.base import TargetError
from pytest_mooncake.targets.mooncake.install import MooncakeInstall
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags


class Launcher(Protocol):
    bind_host: str
    """Address components listen on for what the test process reaches (control, admin)."""
    master_rpc: Mapping[str, str]
    """Master settings that give it a reachable RPC address (``rpc_address``, ...)."""
    master_flags: MasterFlags
    """How the build's mooncake_master spells the family's settings."""
    control_port: int
    """Port a driver's control socket listens on (0: any, reported in its ready file)."""
    version: str

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: ReadyProbe | None, ready_timeout: float,
              publish: Sequence[int] = ()) -> ManagedProcess: ...
    def host_port(self, process: Any, port: int) -> int:
        """The port of this host's view where ``port`` of ``process`` is reachable."""
        ...
    def host_address(self, process: Any) -> str:
        """The address this host reaches ``process`` at (127.0.0.1, or a container's)."""
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
    master_rpc = {"rpc_address": "127.0.0.1"}
    control_port = 0

    def __init__(self, install: MooncakeInstall, supervisor: Supervisor,
                 facts: ReleaseFacts | None = None):
        self.install = install
        self.supervisor = supervisor
        self.facts = facts

    @property
    def master_flags(self) -> MasterFlags:
        if self.facts is None:
            raise TargetError(f"{self.install.version}: no probed facts to spell master flags")
        return MasterFlags.of(self.facts)

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

    def host_address(self, process: Any) -> str:
        return "127.0.0.1"

    def environment(self, extra: Mapping[str, str]) -> Mapping[str, str]:
        return self.install.env(dict(extra))

    def driver_argv(self, *args: str) -> list[str]:
        return self.install.driver_argv(*args)

    def master_binary(self) -> str:
        build = self.install.build
        binary = build.master_binary if build is not None else None
        if binary is None:
            raise TargetError(f"{self.install.version} ships no mooncake_master binary")
        return str(binary)

    def host_name(self, name: str) -> str:
        return "127.0.0.1"

    def port(self) -> int:
        return free_port()

    def release(self, port: int) -> None:
        release_port(port)
