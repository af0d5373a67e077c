"""Metadata stores real Mooncake engines publish to: the session etcd, the session Redis (for a
build that takes ``redis://``), or the wheel's own HTTP metadata server
(``python -m mooncake.http_metadata_server``) on loopback."""

from __future__ import annotations

import urllib.parse
from typing import Any

from pytest_mooncake.runtime.etcd_process import etcd_client
from pytest_mooncake.runtime.loopback_http import http_request
from pytest_mooncake.runtime.processes import ManagedProcess
from pytest_mooncake.runtime.redis_process import redis_client

KEY_PREFIX = "mooncake/"


def segment_key(segment: str) -> str:
    """Mooncake's key for a segment descriptor: ``mooncake/ram/<name>``, or
    ``mooncake/<name>`` when the name holds a ``/``."""
    return f"{KEY_PREFIX}{segment}" if "/" in segment else f"{KEY_PREFIX}ram/{segment}"


class EtcdMetadata:
    """An etcd cluster reached through ``endpoints`` (possibly a fault proxy in front)."""

    kind = "etcd"

    def __init__(self, endpoints: list[str], origin: list[str] | None = None):
        self.endpoints = list(endpoints)
        self._origin = list(origin or endpoints)
        self._client: Any = None

    @property
    def uri(self) -> str:
        return "etcd://" + ";".join(self.endpoints)

    @property
    def address(self) -> str:
        return self._origin[0]

    def _etcd(self) -> Any:
        if self._client is None:
            self._client = etcd_client(self._origin[0], timeout=5)
        return self._client

    def get(self, key: str) -> bytes | None:
        value, _ = self._etcd().get(key)
        return value

    def put(self, key: str, value: bytes) -> None:
        self._etcd().put(key, value)

    def delete(self, key: str) -> bool:
        return bool(self._etcd().delete(key))

    def keys(self, prefix: str = "") -> list[str]:
        if not prefix:
            return sorted(m.key.decode() for _, m in self._etcd().get_all())
        return sorted(m.key.decode() for _, m in self._etcd().get_prefix(prefix))

    def segment_key(self, segment: str) -> str:
        return segment_key(segment)

    def through(self, address: str) -> EtcdMetadata:
        return EtcdMetadata([address], origin=self._origin)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RedisMetadata:
    """A Redis reached at ``address`` (possibly a fault proxy in front), with Mooncake's Redis
    layout: the etcd key names, each a plain string holding the descriptor's JSON."""

    kind = "redis"

    def __init__(self, address: str, origin: str | None = None):
        self.endpoints = [address]
        self._origin = origin or address
        self._client: Any = None

    @property
    def uri(self) -> str:
        return "redis://" + self.endpoints[0]

    @property
    def address(self) -> str:
        return self._origin

    def _redis(self) -> Any:
        if self._client is None:
            self._client = redis_client(self._origin, timeout=5)
        return self._client

    def get(self, key: str) -> bytes | None:
        return self._redis().get(key)

    def put(self, key: str, value: bytes) -> None:
        self._redis().set(key, bytes(value))

    def delete(self, key: str) -> bool:
        return bool(self._redis().delete(key))

    def keys(self, prefix: str = "") -> list[str]:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
        return sorted(k.decode() for k in self._redis().scan_iter(match=pattern, count=500))

    def segment_key(self, segment: str) -> str:
        return segment_key(segment)

    def through(self, address: str) -> RedisMetadata:
        return RedisMetadata(address, origin=self._origin)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class HttpMetadata:
    """Mooncake's HTTP metadata API at ``http://host:port/metadata``; ``process`` is the server
    this handle started (stopped by ``close``), None for a server reached through a proxy."""

    kind = "http"

    def __init__(self, host_port: str, process: ManagedProcess | None = None,
                 origin: str | None = None):
        self.host_port = host_port
        self.process = process
        self._origin = origin or host_port

    @property
    def uri(self) -> str:
        return f"http://{self.host_port}/metadata"

    @property
    def address(self) -> str:
        return self._origin

    def _url(self, key: str) -> str:
        return f"http://{self._origin}/metadata?key={urllib.parse.quote(key, safe='')}"

    def _call(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        answer = http_request(method, self._url(key), body, timeout=5)
        return answer.status, answer.body

    def get(self, key: str) -> bytes | None:
        status, body = self._call("GET", key)
        return body if status == 200 else None

    def put(self, key: str, value: bytes) -> None:
        status, body = self._call("PUT", key, value)
        if status != 200:
            raise RuntimeError(f"PUT {key} on {self.uri} answered {status}: {body[:200]!r}")

    def delete(self, key: str) -> bool:
        status, _ = self._call("DELETE", key)
        return status == 200

    def keys(self, prefix: str = "") -> list[str]:
        raise NotImplementedError(
            "Mooncake's HTTP metadata server has no way to list keys (GET/PUT/DELETE of one key)")

    def segment_key(self, segment: str) -> str:
        return segment_key(segment)

    def through(self, address: str) -> HttpMetadata:
        return HttpMetadata(address, origin=self._origin)

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
