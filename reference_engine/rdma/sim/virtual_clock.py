"""Virtual time for the controlled scheduler.

Under the controlled scheduler time only passes when a step asks it to (``advance_to``), so
timeouts (two-phase destruction, rail pauses) are scheduling choices, not wall-clock accidents.
"""

from __future__ import annotations


class VirtualClock:
    virtual = True

    def __init__(self, start: float = 1000.0):
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t > self._now:
            self._now = t
