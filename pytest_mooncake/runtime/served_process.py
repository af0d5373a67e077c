"""The lifecycle every backing server we run ourselves shares (etcd, redis-server): start
bounded by a readiness probe, stop/start on the same ports, kill, one-line failure messages.

A subclass sets ``process`` (its ``ManagedProcess``), ``unavailable`` (the exception a failed
start raises) and ``readiness`` (what its probe waits for), and may extend ``start``/``close``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_mooncake.runtime.processes import ProcessExitedEarly, ProcessStartError


@dataclass(frozen=True)
class Readiness:
    """The words of one server's readiness probe, for its start-failure message."""

    server: str
    """``etcd (BINARY)``: the program, as the message names it."""
    probe: str
    """``PING at H:P``: what is asked."""
    ready: str
    """``answer PONG``: what the probe waits for (infinitive)."""
    became: str
    """``answered PONG``: the same in the past tense."""
    state: str
    """``ready``: the state the server did not reach."""
    log: str
    """``its log``: how the message points at the log."""
    fix: str
    """``set MC_X_BIN to ..., or pass --mc-x=HOST:PORT ...``: what to do instead."""
    timeout_env: str
    """The environment variable that raises the readiness deadline."""


class ServedProcess:
    """A server process on loopback that we start, stop and restart ourselves."""

    owned = True
    process: Any
    unavailable: type[Exception]
    ready_timeout: float

    def readiness(self) -> Readiness:
        raise NotImplementedError

    def start(self) -> Any:
        try:
            self.process.start()
        except ProcessStartError as exc:
            raise self.unavailable(self.not_ready(not isinstance(exc, ProcessExitedEarly))) \
                from None
        return self

    def not_ready(self, timed_out: bool) -> str:
        """One line: what happened, where the log is, what to do."""
        r = self.readiness()
        if timed_out:
            what = (f"{r.probe} did not {r.ready} within {self.ready_timeout:g}s (killed it; "
                    f"raise {r.timeout_env} if this machine is only slow)")
        else:
            what = f"it exited with {self.process.returncode} before {r.probe} {r.became}"
        return (f"{r.server} did not become {r.state}: {what}; see {r.log} (shown below, and "
                f"at {self.process.log_path}), then fix what it says, {r.fix}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its ports (and data) are kept for
        ``start``."""
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def alive(self) -> bool:
        return self.process.alive()

    def log_text(self) -> str:
        return self.process.log_text()
