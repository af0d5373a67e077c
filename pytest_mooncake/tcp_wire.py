"""Mooncake's TCP data-port framing (tcp_proto_version 1 and 2), client side only.

Written from Mooncake's transport sources and checked against the 0.3.13 wheel, independently of
the reference engine's codec, so a suite can talk to any target's data port directly. A request
is a 24-byte little-endian header (u64 size, u64 address, u8 opcode: 0 READ, 1 WRITE, 0x80 set
for version 2, then 7 bytes of padding), a WRITE's body follows it. Version 2 answers each
request with an 8-byte status frame ("MCTV" in the high word; low word 0 = ok, 1 = rejected),
a READ's data after it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

READ = 0
WRITE = 1
_HEADER = struct.Struct("<QQB7x")
_V2 = 0x80
STATUS_OK = struct.pack("<Q", 0x4D435456 << 32)
STATUS_REJECTED = struct.pack("<Q", (0x4D435456 << 32) | 1)


def request(op: int, addr: int, size: int, version: int, body: bytes = b"") -> bytes:
    """One request on the wire (``body`` only for a WRITE)."""
    return _HEADER.pack(size, addr, op | (_V2 if version >= 2 else 0)) + body


def data_endpoint(descriptor: Mapping[str, Any]) -> tuple[str, int] | None:
    """(host, port) of a published TCP segment's data port; None if it publishes none."""
    port = descriptor.get("tcp_data_port") or 0
    if descriptor.get("protocol") != "tcp" or not port:
        return None
    host = descriptor.get("tcp_data_host") or str(descriptor.get("name", "")).rpartition(":")[0]
    return (host.strip("[]") or "127.0.0.1"), int(port)


def proto_version(descriptor: Mapping[str, Any]) -> int:
    """The framing a client must use: ``tcp_proto_version``, 1 when absent (as Mooncake)."""
    return int(descriptor.get("tcp_proto_version") or 1)
