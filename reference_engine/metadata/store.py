"""The metadata store interface every backend implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class MetadataError(OSError):
    """A metadata operation failed (store unreachable, timeout, refused); names the key."""

    def __init__(self, backend: str, op: str, key: str, reason: str):
        self.backend, self.op, self.key, self.reason = backend, op, key, reason
        super().__init__(f"{backend} {op} {key!r}: {reason}")


@runtime_checkable
class MetadataStore(Protocol):
    """Raw key/value access; values are bytes exactly as stored."""

    uri: str

    def get(self, key: str) -> bytes | None:
        """The stored value, or None when the key is absent. Raises MetadataError on failure."""
        ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> bool:
        """True when a value was deleted, False when there was none."""
        ...

    def keys(self, prefix: str = "") -> list[str]: ...

    def close(self) -> None: ...
