"""n/a as a value: which means a target lacks and the target's own reason.

A ``TargetLacks`` raised anywhere in a test (a factory, a fixture, ``mc_requires`` at setup)
carries one of these; the plugin turns it into a skipped report that keeps the object (a user
property, so it crosses xdist), and the matrix reads it back from there. Text is made only
for people: ``str()`` is the line a terminal shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROPERTY = "mc_na"
"""The report user property that carries a ``NotApplicable`` (as a plain tuple)."""


@dataclass(frozen=True)
class NotApplicable:
    capability: str | None
    """The ``Capability`` value the target lacks; None for a plain ``pytest.skip`` in a
    requirement test (it names no means, but the verdict rule counts it the same)."""
    reason: str
    """The target's reason, computed from its probes in this run."""

    def __str__(self) -> str:
        return f"n/a: {self.reason}"

    def as_property(self) -> tuple[str, tuple[str | None, str]]:
        """(name, value) for ``report.user_properties``: plain data that xdist can send."""
        return PROPERTY, (self.capability, self.reason)

    @classmethod
    def from_properties(cls, properties: list[tuple[str, Any]]) -> NotApplicable | None:
        """The one a report carries, if any."""
        for name, value in properties:
            if name == PROPERTY:
                capability, reason = value
                return cls(capability, reason)
        return None
