"""Leader election on Redis, with the semantics of Mooncake's ``RedisLeaderCoordinator``.

What the coordinator does (``mooncake-store/src/ha/leadership/backends/redis/``): the leader is
a Redis hash ``mooncake-store/{<cluster>}/master_view`` with fields ``leader_address``,
``view_version`` and ``owner_token``, under a lease (``PEXPIRE``, 5 s by default); the view
version comes from ``INCR`` of ``mooncake-store/{<cluster>}/master_view_version`` (the braces are
a Redis Cluster hash tag: both keys in one slot; ``{``/``}`` in the cluster id become ``_`` and
one trailing ``/`` is dropped). Acquiring, renewing and releasing are each one Lua script, so
each is atomic: acquire only when the hash is absent; renew and release only while
``owner_token`` is still ours. Followers poll the hash (``HMGET``): there is no watch.

This module has the interface of ``election.py`` (``LeaderElection``/``LeaderSession``), with
the same validity rule: a leader may serve only until the last renewal it *sent* plus the lease,
minus a margin, so it stops before Redis could have expired the hash. A master started with
``--redis`` elects with it (``ha_backends.py``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from reference_engine.master.election import LeaderView, LeasedSession
from reference_engine.master.redis_client import is_redis_failure

ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0}
end
local version = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'leader_address', ARGV[1], 'view_version', tostring(version),
           'owner_token', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, version}
"""
RENEW = """
if redis.call('HGET', KEYS[1], 'owner_token') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
RELEASE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HGET', KEYS[1], 'owner_token') ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
"""


def hash_tag(cluster: str) -> str:
    """The cluster id as the coordinator puts it between braces."""
    if cluster.endswith("/"):
        cluster = cluster[:-1]
    return cluster.replace("{", "_").replace("}", "_")


def master_view_key(cluster: str) -> str:
    return "mooncake-store/{" + hash_tag(cluster) + "}/master_view"


def view_version_key(cluster: str) -> str:
    return "mooncake-store/{" + hash_tag(cluster) + "}/master_view_version"


class RedisLeaderSession(LeasedSession):
    """Held leadership: the hash we renew until ``release``."""

    def __init__(self, election: RedisLeaderElection, view: LeaderView, token: str,
                 granted_at: float):
        super().__init__(view, election.ttl, election.margin, granted_at)
        self._election = election
        self.token = token

    def _renew(self) -> float | None:
        try:
            renewed = self._election.renew_script(keys=[self._election.key],
                                                  args=[self.token, self._election.ttl_ms])
        except Exception as exc:  # noqa: BLE001
            if is_redis_failure(exc):
                return None
            raise
        return self.ttl if int(renewed) == 1 else 0

    def still_holds_key(self, key: str | None = None) -> bool:
        owner = self._election.client.hget(key or self._election.key, "owner_token")
        return owner is not None and owner.decode() == self.token

    def release(self) -> None:
        """Give leadership up: delete the hash if it is still ours (best effort)."""
        self.released = True
        try:
            self._election.release_script(keys=[self._election.key], args=[self.token])
        except Exception as exc:  # noqa: BLE001
            if not is_redis_failure(exc):
                raise


class RedisLeaderElection:
    """Acquire and observe leadership of ``cluster`` on one Redis (a redis-py client)."""

    def __init__(self, client: Any, cluster: str, address: str, ttl: float = 5.0,
                 margin: float = 0.3):
        self.client = client
        self.key = master_view_key(cluster)
        self.version_key = view_version_key(cluster)
        self.address = address
        self.ttl = ttl
        self.margin = margin
        self.acquire_script = client.register_script(ACQUIRE)
        self.renew_script = client.register_script(RENEW)
        self.release_script = client.register_script(RELEASE)

    @property
    def ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    def current(self) -> LeaderView | None:
        address, version = self.client.hmget(self.key, "leader_address", "view_version")
        if address is None or version is None:
            return None  # absent, or partly written (the coordinator treats it as absent too)
        return LeaderView(address.decode(errors="replace"), int(version), 0)

    def try_acquire(self) -> RedisLeaderSession | None:
        sent = time.monotonic()
        token = str(uuid.uuid4())
        answer = self.acquire_script(keys=[self.key, self.version_key],
                                     args=[self.address, self.ttl_ms, token])
        if not answer or int(answer[0]) != 1:
            return None
        view = LeaderView(self.address, int(answer[1]), 0)
        return RedisLeaderSession(self, view, token, granted_at=sent)
