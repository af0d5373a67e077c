"""Store clients the master knows: heartbeats with a TTL, after which their segments go."""

from __future__ import annotations

import enum


class ClientStatus(str, enum.Enum):
    OK = "OK"
    NEED_REMOUNT = "NEED_REMOUNT"


class ClientRegistry:
    """``ping`` keeps a client alive; ``expire`` returns those silent for longer than ``ttl``."""

    def __init__(self, ttl: float = 10.0):
        self.ttl = ttl
        self._deadline: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, client_id: str) -> bool:
        return client_id in self._deadline

    def ids(self) -> list[str]:
        return list(self._deadline)

    def ping(self, client_id: str, now: float) -> ClientStatus:
        """A heartbeat. Unknown clients (first contact, expired, new leader) must remount."""
        if client_id not in self._deadline:
            return ClientStatus.NEED_REMOUNT
        self._deadline[client_id] = now + self.ttl
        return ClientStatus.OK

    def admit(self, client_id: str, now: float) -> None:
        """A client mounted or remounted its segments: it is OK from now on."""
        self._deadline[client_id] = now + self.ttl

    def expire(self, now: float) -> list[str]:
        gone = [c for c, deadline in self._deadline.items() if deadline <= now]
        for c in gone:
            del self._deadline[c]
        return gone

    def forget(self, client_id: str) -> None:
        self._deadline.pop(client_id, None)
