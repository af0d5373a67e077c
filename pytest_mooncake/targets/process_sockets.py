"""An engine's TCP sockets as ``/proc`` on this host shows them: whom a process is connected to,
observed from outside (no hook in the engine), for handles whose process runs here. The cluster
target reads the same over SSH (``nodes.scripts.SOCKETS``)."""

from __future__ import annotations

import os

from pytest_mooncake.nodes.proc_sockets import Socket, of_local_process
from pytest_mooncake.targets.base import Capability, TargetLacks


def local_sockets(pid: int | None, segment: str) -> list[Socket]:
    """The TCP sockets of process ``pid`` (listening and connected); [] when it is not running;
    ``TargetLacks`` when it runs but ``/proc`` does not show them (no means to observe)."""
    if pid is None:
        return []
    seen = of_local_process(pid)
    if seen is not None:
        return seen
    if not os.path.exists(f"/proc/{pid}"):
        return []
    raise TargetLacks(Capability.ENGINE, (
        f"/proc/{pid} of engine {segment!r} exists but its fds or TCP tables cannot be read "
        f"(running as uid {os.getuid()})"))
