"""etcd through the ``etcd3`` client (imported on first use), with endpoint failover."""

from __future__ import annotations

import threading
from typing import Any

from reference_engine.etcd_connection import etcd3_client
from reference_engine.metadata.store import MetadataError


class EtcdStore:
    """Plain get/put/delete of Mooncake's keys. Endpoints are tried in order on failure."""

    def __init__(self, endpoints: tuple[tuple[str, int], ...] | list[tuple[str, int]],
                 timeout: float = 3.0):
        if not endpoints:
            raise ValueError("EtcdStore needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.uri = "etcd://" + ";".join(f"{h}:{p}" for h, p in self.endpoints)
        self._clients: dict[int, Any] = {}
        self._current = 0
        self._lock = threading.Lock()

    def _client(self, index: int) -> Any:
        with self._lock:
            client = self._clients.get(index)
            if client is None:
                host, port = self.endpoints[index]
                client = etcd3_client(host, port, self.timeout)
                self._clients[index] = client
            return client

    def _call(self, op: str, key: str, fn: Any) -> Any:
        last: Exception | None = None
        n = len(self.endpoints)
        for step in range(n):
            index = (self._current + step) % n
            try:
                result = fn(self._client(index))
            except Exception as exc:  # etcd3 raises grpc errors of many kinds
                last = exc
                self._forget(index)
                continue
            self._current = index
            return result
        raise MetadataError(self.uri, op, key, f"{type(last).__name__}: {last}")

    def _forget(self, index: int) -> None:
        """Drop a failed endpoint's channel: a fresh one (with a connection of its own)
        reconnects at once, while the old one can keep a healed endpoint unusable for many
        seconds (``reference_engine/etcd_connection.py``)."""
        with self._lock:
            client = self._clients.pop(index, None)
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken channel must not mask the caller's error
                pass

    def get(self, key: str) -> bytes | None:
        value, _ = self._call("get", key, lambda c: c.get(key))
        return value

    def put(self, key: str, value: bytes) -> None:
        self._call("put", key, lambda c: c.put(key, bytes(value)))

    def delete(self, key: str) -> bool:
        return bool(self._call("delete", key, lambda c: c.delete(key)))

    def keys(self, prefix: str = "") -> list[str]:
        def scan(c: Any) -> list[str]:
            if prefix:
                items = c.get_prefix(prefix, keys_only=True)
            else:
                items = c.get_all(keys_only=True)
            return sorted(meta.key.decode("utf-8", "replace") for _, meta in items)

        return self._call("keys", prefix, scan)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                try:
                    client.close()
                except Exception:  # closing a broken channel must not mask the caller's error
                    pass
            self._clients.clear()
