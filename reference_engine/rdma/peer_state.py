"""Per-target peer state for replacement recovery (metadata RFC, stage 3; MR-9..MR-13).

The worker records, per target segment, the ``instance_id`` it last saw and the peer NIC paths
it derived from it. A different ``instance_id`` means a new process: the caller retires the
old paths' endpoints *after* this object's mutex is released (MR-13).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class TargetPeerState:
    instance_id: str | None
    peer_nic_paths: set[str] = field(default_factory=set)


class InstanceTracking:
    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.targets: dict[str, TargetPeerState] = {}

    def observe(self, target: str, descriptor) -> set[str] | None:
        """Record ``descriptor``'s identity; the old paths when it is a new instance, else None."""
        new_id = getattr(descriptor, "instance_id", None)
        with self.mutex:
            state = self.targets.get(target)
            if state is None:
                self.targets[target] = TargetPeerState(new_id)
                return None
            if new_id is None or state.instance_id is None or new_id == state.instance_id:
                if state.instance_id is None:
                    state.instance_id = new_id
                return None
            old_paths = state.peer_nic_paths
            self.targets[target] = TargetPeerState(new_id)
            return old_paths

    def record_path(self, target: str, path: str) -> None:
        with self.mutex:
            state = self.targets.get(target)
            if state is not None:
                state.peer_nic_paths.add(path)

    def instance_of(self, target: str) -> str | None:
        state = self.targets.get(target)
        return state.instance_id if state else None


class NoTracking:
    """Legacy: identity is never looked at."""

    def observe(self, target: str, descriptor) -> set[str] | None:
        return None

    def record_path(self, target: str, path: str) -> None:
        pass

    def instance_of(self, target: str) -> str | None:
        return None
