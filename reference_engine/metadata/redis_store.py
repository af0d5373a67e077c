"""Redis through ``redis-py`` (imported on first use), as Mooncake's ``redis://`` plugin uses it.

What Mooncake's transfer engine does (``transfer_metadata_plugin.cpp``, ``RedisStoragePlugin``):
one connection to ``redis://HOST:PORT``; the same key names as on etcd (``mooncake/ram/<seg>``,
``mooncake/rpc_meta/<seg>``), each a plain Redis string set with ``SET key value`` and read
with ``GET key``, removed with ``DEL key``; the value is the descriptor's JSON text. The
environment chooses the account and database: ``MC_REDIS_USERNAME`` with
``MC_REDIS_PASSWORD`` (``AUTH``), ``MC_REDIS_DB_INDEX`` (0..255, ``SELECT``; anything else means
0). Every operation here is one command, so one key is read and written atomically, which is
all the MR RFC assumes of a store. Unlike hiredis' single context, redis-py's pool opens a new
connection after a failed one: a store that comes back is used again (the RFC's recovery).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from reference_engine.metadata.store import MetadataError

USERNAME_ENV = "MC_REDIS_USERNAME"
PASSWORD_ENV = "MC_REDIS_PASSWORD"
DB_INDEX_ENV = "MC_REDIS_DB_INDEX"


def db_index_from_env(environ: dict[str, str] | None = None) -> int:
    """``MC_REDIS_DB_INDEX`` as Mooncake reads it: an integer 0..255, else database 0."""
    raw = (os.environ if environ is None else environ).get(DB_INDEX_ENV, "").strip()
    try:
        index = int(raw)
    except ValueError:
        return 0
    return index if 0 <= index <= 255 else 0


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisStore:
    """Plain GET/SET/DEL of Mooncake's keys on one Redis server."""

    def __init__(self, host: str, port: int, timeout: float = 3.0,
                 environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.host, self.port = host, int(port)
        self.timeout = timeout
        self.uri = f"redis://{host}:{port}"
        self.db = db_index_from_env(env)
        self._username = env.get(USERNAME_ENV) or None
        self._password = env.get(PASSWORD_ENV) or None
        self._client: Any = None
        self._lock = threading.Lock()

    def _redis(self) -> Any:
        with self._lock:
            if self._client is None:
                import redis  # noqa: PLC0415 (only engines on redis:// need it)
                from redis.backoff import NoBackoff  # noqa: PLC0415
                from redis.retry import Retry  # noqa: PLC0415

                # no retries inside the client: the engine's own policy decides what a failed
                # lookup does, and a forced refresh must fail within its bound
                self._client = redis.Redis(
                    host=self.host, port=self.port, db=self.db, username=self._username,
                    password=self._password, socket_timeout=self.timeout,
                    socket_connect_timeout=self.timeout, retry=Retry(NoBackoff(), 0))
            return self._client

    def _call(self, op: str, key: str, fn: Any) -> Any:
        try:
            return fn(self._redis())
        except Exception as exc:  # redis-py: ConnectionError, TimeoutError, ResponseError...
            raise MetadataError(self.uri, op, key, f"{type(exc).__name__}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        return self._call("get", key, lambda r: r.get(key))

    def put(self, key: str, value: bytes) -> None:
        self._call("put", key, lambda r: r.set(key, bytes(value)))

    def delete(self, key: str) -> bool:
        return bool(self._call("delete", key, lambda r: r.delete(key)))

    def keys(self, prefix: str = "") -> list[str]:
        pattern = _glob_escape(prefix) + "*"
        return self._call("keys", prefix, lambda r: sorted(
            k.decode("utf-8", "replace") for k in r.scan_iter(match=pattern, count=500)))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken connection must not mask the caller's error
                pass
