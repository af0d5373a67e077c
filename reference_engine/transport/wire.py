"""Mooncake TCP transport wire format (tcp_proto_version 1 and 2).

Learned from Mooncake's ``tcp_transport`` sources and checked against the released 0.3.13 wheel
(see ``tests/interop``). Every request starts with a 24-byte session header, little-endian::

    offset 0   u64  size     bytes to move
    offset 8   u64  addr     address in the *server's* registered memory
    offset 16  u8   opcode   0 = READ, 1 = WRITE; bit 0x80 set = version 2 framing
    offset 17  7 bytes padding (the C++ struct's alignment; senders may leave garbage there,
                             receivers ignore it)

A WRITE header is followed by ``size`` body bytes. Version 2 adds 8-byte little-endian status
frames whose high 32 bits are the magic ``"MCTV"`` (0x4D435456): a READ response is
``status + size bytes``, a WRITE is acknowledged with one status frame after its body has been
applied. A request outside the server's registered buffers (or of size 0) is answered with the
rejection status (low word 1) and the server closes the connection; a version 1 request is
rejected by closing alone. The server handles the requests of one connection strictly in order,
so clients may pipeline them.

Observed on the released 0.3.13 wheel (``tests/interop``, raw-socket probes): the 24-byte header
with garbage padding is accepted; pipelined requests are answered in order; a rejected WRITE
gets its rejection frame and then a reset (the frame stays readable after the send fails); a
v2 READ of size 0 is rejected; an unknown opcode with the v2 flag is served as a READ, without
it the connection just hangs (our server closes instead, with a log line); the real initiator
opens up to 4 connections per peer, sends to any address without checking it against the
target's descriptor, completes zero-length requests locally, and reports a v1 WRITE complete
before the bytes have landed (v1 has no acknowledgement).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

READ = 0
WRITE = 1
V2_FLAG = 0x80
PROTO_V1 = 1
PROTO_V2 = 2

HEADER = struct.Struct("<QQB7x")
HEADER_SIZE = HEADER.size  # 24

STATUS = struct.Struct("<Q")
STATUS_SIZE = STATUS.size  # 8
STATUS_MAGIC = 0x4D435456 << 32
STATUS_OK = STATUS_MAGIC | 0
STATUS_REJECTED = STATUS_MAGIC | 1
STATUS_OK_FRAME = STATUS.pack(STATUS_OK)
STATUS_REJECTED_FRAME = STATUS.pack(STATUS_REJECTED)

_U64_MAX = (1 << 64) - 1


class Header(NamedTuple):
    size: int
    addr: int
    opcode: int  # READ or WRITE, flag stripped
    v2: bool


def opcode_byte(opcode: int, proto_version: int) -> int:
    if opcode not in (READ, WRITE):
        raise ValueError(f"opcode must be READ (0) or WRITE (1), not {opcode!r}")
    return opcode | (V2_FLAG if proto_version >= PROTO_V2 else 0)


def encode_header(opcode: int, addr: int, size: int, proto_version: int = PROTO_V2) -> bytes:
    if not 0 <= addr <= _U64_MAX:
        raise ValueError(f"addr {addr!r} does not fit in u64")
    if not 0 <= size <= _U64_MAX:
        raise ValueError(f"size {size!r} does not fit in u64")
    return HEADER.pack(size, addr, opcode_byte(opcode, proto_version))


def decode_header(data, offset: int = 0) -> Header:
    """Decode one header; the opcode is returned as sent (minus the flag), unvalidated."""
    size, addr, raw = HEADER.unpack_from(data, offset)
    return Header(size, addr, raw & ~V2_FLAG, bool(raw & V2_FLAG))


def status_is_frame(value: int) -> bool:
    return (value & 0xFFFFFFFF00000000) == STATUS_MAGIC


def describe_status(value: int) -> str:
    if not status_is_frame(value):
        return f"not a status frame (0x{value:016x}; peer likely speaks protocol v1)"
    code = value & 0xFFFFFFFF
    return {0: "ok", 1: "address rejected"}.get(code, f"unknown status {code}")
