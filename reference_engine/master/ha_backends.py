"""Where HA masters keep their shared state: etcd or Redis, one strategy object each.

A backend gives the master everything it shares with the other masters and the store
clients: the election (``election.py`` / ``redis_election.py``), the OpLog
(``oplog_store.py`` / ``redis_oplog_store.py``), the planned-handover record, and the leader
lookup store clients use. ``open_ha_backend`` picks one from where it is: ``redis://host:port``
is Redis (as Mooncake's ``master_server_entry`` spells it), anything else etcd endpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_engine.master.election import LeaderElection
from reference_engine.master.etcd_client import connect as connect_etcd
from reference_engine.master.etcd_client import parse_endpoints
from reference_engine.master.oplog import master_view_key
from reference_engine.master.oplog_store import OpLogStore


class EtcdHaBackend:
    """Leader key under an etcd lease, OpLog in etcd transactions."""

    name = "etcd"

    def __init__(self, endpoints: str | Sequence[str], timeout: float):
        self.endpoints = parse_endpoints(endpoints)
        self.client = connect_etcd(self.endpoints, timeout=timeout)

    @property
    def location(self) -> str:
        return ",".join(self.endpoints)

    def election(self, cluster: str, address: str, ttl: float, margin: float) -> Any:
        return LeaderElection(self.client, cluster, address, int(ttl), margin=margin)

    def oplog_store(self, cluster: str) -> Any:
        return OpLogStore(self.client, cluster)

    def leader_address(self, cluster: str) -> str | None:
        value, _ = self.client.get(master_view_key(cluster))
        return None if value is None else value.decode(errors="replace")

    def read_record(self, key: str) -> bytes | None:
        return self.client.get(key)[0]

    def write_record(self, key: str, value: str, ttl: int) -> None:
        """``value`` at ``key`` until ``ttl`` seconds pass (an etcd lease)."""
        self.client.put(key, value, lease=self.client.lease(ttl))

    def record_key(self, cluster: str, name: str) -> str:
        return f"mooncake-store/{cluster.rstrip('/')}/{name}"

    def close(self) -> None:
        self.client.close()


class RedisHaBackend:
    """Leader hash under ``PEXPIRE`` (Mooncake's RedisLeaderCoordinator), OpLog in Lua-scripted
    transactions on keys of the same hash tag (Mooncake's Redis OpLog backend)."""

    name = "redis"

    def __init__(self, address: str, timeout: float):
        from reference_engine.master.redis_client import connect, parse_address

        self.address = parse_address(address)
        self.client = connect(self.address, timeout)

    @property
    def location(self) -> str:
        return f"redis://{self.address}"

    def election(self, cluster: str, address: str, ttl: float, margin: float) -> Any:
        from reference_engine.master.redis_election import RedisLeaderElection

        return RedisLeaderElection(self.client, cluster, address, ttl, margin=margin)

    def oplog_store(self, cluster: str) -> Any:
        from reference_engine.master.redis_oplog_store import RedisOpLogStore

        return RedisOpLogStore(self.client, cluster)

    def leader_address(self, cluster: str) -> str | None:
        from reference_engine.master.redis_election import master_view_key as redis_view_key

        value = self.client.hget(redis_view_key(cluster), "leader_address")
        return None if value is None else value.decode(errors="replace")

    def read_record(self, key: str) -> bytes | None:
        return self.client.get(key)

    def write_record(self, key: str, value: str, ttl: int) -> None:
        self.client.set(key, value, px=max(1, int(ttl * 1000)))

    def record_key(self, cluster: str, name: str) -> str:
        from reference_engine.master.redis_election import hash_tag

        return "mooncake-store/{" + hash_tag(cluster) + "}/" + name

    def close(self) -> None:
        self.client.close()


def open_ha_backend(location: str | Sequence[str], timeout: float) -> EtcdHaBackend | RedisHaBackend:
    """The backend at ``location``: ``redis://host:port``, or etcd endpoints
    (``h:p[,h:p]``, ``etcd://h:p;h:p`` or a list)."""
    if isinstance(location, str) and location.strip().startswith("redis://"):
        return RedisHaBackend(location, timeout)
    return EtcdHaBackend(location, timeout)
