"""An in-memory store for unit tests of one class."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar


class MemoryStore:
    """A dict behind a lock. ``fail`` (when set) is called before each operation to inject errors."""

    _named: ClassVar[dict[str, MemoryStore]] = {}

    def __init__(self, uri: str = "memory://") -> None:
        self.uri = uri
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.fail: Callable[[str, str], None] | None = None
        self.ops = 0

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """One shared store per name within a process (``memory://name``)."""
        return cls._named.setdefault(name, cls(f"memory://{name}"))

    def _op(self, op: str, key: str) -> None:
        self.ops += 1
        if self.fail is not None:
            self.fail(op, key)

    def get(self, key: str) -> bytes | None:
        self._op("get", key)
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self._op("put", key)
        with self._lock:
            self._data[key] = bytes(value)

    def delete(self, key: str) -> bool:
        self._op("delete", key)
        with self._lock:
            return self._data.pop(key, None) is not None

    def keys(self, prefix: str = "") -> list[str]:
        self._op("keys", prefix)
        with self._lock:
            return sorted(k for k in self._data if k.startswith(prefix))

    def close(self) -> None:
        pass
