"""Metadata connection strings as Mooncake spells them (mooncake-semantics.md 1.5)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


class MetadataUriError(ValueError):
    """A connection string we cannot use; says what is wrong with it."""


@dataclass(frozen=True)
class MetadataUri:
    kind: str
    """``etcd``, ``redis``, ``http``, ``p2p`` (``P2PHANDSHAKE``: no store) or ``memory``
    (tests only)."""
    endpoints: tuple[tuple[str, int], ...] = ()
    url: str = ""
    name: str = ""


def _host_port(text: str, uri: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host:
        raise MetadataUriError(f"metadata URI {uri!r}: endpoint {text!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise MetadataUriError(f"metadata URI {uri!r}: bad port {port!r} in {text!r}")
    return host, int(port)


def parse_uri(uri: str) -> MetadataUri:
    """``etcd://h:p[;h:p]``, bare ``h:p[;h:p]`` (= etcd), ``redis://h:p``, ``http(s)://h:p/path``,
    ``memory://n``, ``P2PHANDSHAKE``."""
    if not isinstance(uri, str) or not uri.strip():
        raise MetadataUriError("metadata URI is empty")
    uri = uri.strip()
    if uri == "P2PHANDSHAKE":
        return MetadataUri("p2p")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "etcd", uri
    scheme = scheme.lower()
    if scheme == "etcd":
        parts = [p for p in rest.split(";") if p.strip()]
        if not parts:
            raise MetadataUriError(f"metadata URI {uri!r}: no etcd endpoint")
        return MetadataUri("etcd", endpoints=tuple(_host_port(p, uri) for p in parts))
    if scheme in ("http", "https"):
        split = urlsplit(uri)
        if not split.hostname:
            raise MetadataUriError(f"metadata URI {uri!r}: no host")
        if not split.path or split.path == "/":
            raise MetadataUriError(
                f"metadata URI {uri!r}: Mooncake uses the whole URL as the base, so it needs "
                f"the path, e.g. http://{split.netloc}/metadata"
            )
        if split.query or split.fragment:
            raise MetadataUriError(f"metadata URI {uri!r}: no query or fragment allowed")
        return MetadataUri("http", url=uri)
    if scheme == "memory":
        return MetadataUri("memory", name=rest)
    if scheme == "redis":
        parts = [p for p in rest.split(";") if p.strip()]
        if len(parts) != 1:
            raise MetadataUriError(
                f"metadata URI {uri!r}: redis takes one host:port, e.g. redis://127.0.0.1:6379")
        return MetadataUri("redis", endpoints=(_host_port(parts[0], uri),))
    raise MetadataUriError(
        f"metadata URI {uri!r}: unknown scheme {scheme!r}; use etcd://h:p, h:p, "
        f"redis://h:p, http://h:p/metadata or P2PHANDSHAKE"
    )
