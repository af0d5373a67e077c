"""Metadata backends behind one small interface, and Mooncake's key layout.

``open_store(uri)`` takes a connection string as Mooncake spells it (``etcd://h:p[;h:p]``, a
bare ``h:p`` meaning etcd, ``redis://h:p``, ``http://h:p/metadata``) and returns a ``MetadataStore``. ``P2PHANDSHAKE`` has
no store: an engine in that mode serves its own descriptor (``handshake_store``).
"""

from __future__ import annotations

from reference_engine.metadata.keys import KeyLayout
from reference_engine.metadata.store import MetadataError, MetadataStore
from reference_engine.metadata.uri import MetadataUri, MetadataUriError, parse_uri


def open_store(uri: str, timeout: float = 3.0) -> MetadataStore:
    """Connect to the metadata store named by ``uri`` (lazily: no I/O until first use)."""
    parsed = parse_uri(uri)
    if parsed.kind == "p2p":
        raise MetadataUriError(
            "P2PHANDSHAKE has no store to open: each engine serves its own descriptor "
            "(reference_engine.metadata.handshake_store.HandshakeStore(name))")
    if parsed.kind == "etcd":
        from reference_engine.metadata.etcd_store import EtcdStore

        return EtcdStore(parsed.endpoints, timeout=timeout)
    if parsed.kind == "redis":
        from reference_engine.metadata.redis_store import RedisStore

        (host, port), = parsed.endpoints
        return RedisStore(host, port, timeout=timeout)
    if parsed.kind == "http":
        from reference_engine.metadata.http_store import HttpStore

        return HttpStore(parsed.url, timeout=timeout)
    from reference_engine.metadata.memory_store import MemoryStore

    return MemoryStore.named(parsed.name)


__all__ = ["KeyLayout", "MetadataError", "MetadataStore", "MetadataUri", "MetadataUriError",
           "open_store", "parse_uri"]
