"""The state a standby rebuilds from the OpLog: objects in wire form and the segment registry.

Objects are kept as decoded PUT_END payloads (plain dicts), not validated: validation is the
promotion's job, and it must see exactly what was replicated, bad entries included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_engine.master.model import SegmentInfo

CORRUPT = {"corrupt": True}
"""The value an undecodable PUT_END payload leaves behind (Mooncake stores empty metadata)."""


@dataclass
class ReplicatedState:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    segments: dict[str, SegmentInfo] = field(default_factory=dict)

    def clear(self) -> None:
        self.objects.clear()
        self.segments.clear()

    def copy(self) -> ReplicatedState:
        return ReplicatedState(dict(self.objects), dict(self.segments))
