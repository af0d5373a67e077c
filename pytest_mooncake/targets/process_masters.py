"""Signals to HA masters that are processes a target started itself (the reference target's and
the Mooncake family's): the kill, stop and liveness part of ``MasterClusterHandle``, the same
for every target whose masters are ``self.masters[i].process``."""

from __future__ import annotations

import signal
from typing import Any


class ProcessMasters:
    masters: list[Any]
    """Per master index, an object whose ``process`` is its ``ManagedProcess`` (or a container
    behaving like one), None before its first start."""

    def kill_master(self, index: int) -> None:
        """SIGKILL: no lease release, no flush; a standby waits for the lease to expire."""
        self.masters[index].process.kill(signal.SIGKILL)

    def pause_master(self, index: int) -> None:
        """SIGSTOP: the master hangs with its sockets open, so a call to it is neither answered
        nor reset (a hung leader, unlike a dead one); ``kill_master`` still ends it."""
        self.masters[index].process.send_signal(signal.SIGSTOP)

    def resume_master(self, index: int) -> None:
        """SIGCONT after ``pause_master``."""
        self.masters[index].process.send_signal(signal.SIGCONT)

    def stop_master(self, index: int) -> None:
        """SIGTERM: the master releases its lease and exits; ``start_master(index)`` restarts it."""
        self.masters[index].process.terminate()

    def alive(self, index: int) -> bool:
        proc = self.masters[index].process
        return proc is not None and proc.alive()
