"""The clock the RDMA path reads: real monotonic time unless a driver hands it another one.

A clock has ``now()`` and says whether it is ``virtual``: a virtual clock only moves when a step
moves it (``advance_to``), so the monitor advances it to the next destruction deadline instead
of waiting for it (the simulation's ``VirtualClock``).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    virtual: bool

    def now(self) -> float: ...

    def advance_to(self, t: float) -> None: ...


class RealClock:
    virtual = False

    def now(self) -> float:
        return time.monotonic()

    def advance_to(self, t: float) -> None:
        """Real time cannot be moved; a real clock is never asked to."""
        raise NotImplementedError("a real clock cannot be advanced")
