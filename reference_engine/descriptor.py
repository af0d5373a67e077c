"""Segment descriptors: the value Mooncake publishes under ``mooncake/ram/<segment>``.

A descriptor is an immutable snapshot. ``decode`` turns raw metadata bytes (untrusted: they come
from a shared store) into one, or raises ``DescriptorError`` naming the segment and the field;
``encode`` writes what Mooncake writes: compact JSON with sorted keys, keys absent from the
snapshot left out, unknown keys carried through unchanged.

Two forms exist in the wild. The source tree (commit 3b5a594) omits ``rdma_server_name`` when
empty and has no ``tcp_data_host``; the released 0.3.13 wheel always writes an empty
``rdma_server_name`` and a ``tcp_data_host``. Optional fields are ``None`` when the key was
absent, so either form round-trips byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

MAX_RAW_BYTES = 1 << 20
"""Largest metadata value we decode; Mooncake's own handshake limit is 1 MiB too."""
MAX_BUFFERS = 4096
MAX_DEVICES = 256
MAX_BUFFER_LENGTH = 1 << 48
MAX_INSTANCE_ID_CHARS = 128
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1

TCP = "tcp"
RDMA_FAMILY = frozenset({"rdma", "barex", "efa", "cxi"})
"""Protocols that publish devices, per-device keys and a priority matrix."""
KEY_COUNT_CHECKED = frozenset({"rdma", "efa", "cxi"})
"""Protocols where Mooncake requires one rkey per device (barex is exempt)."""
KNOWN_PROTOCOLS = frozenset({TCP}) | RDMA_FAMILY

_INSTANCE_ID_RE = re.compile(r"[\x21-\x7e]+")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class DescriptorError(ValueError):
    """A metadata value that is not a valid segment descriptor."""

    def __init__(self, segment: str, field: str, message: str):
        self.segment = segment
        self.field = field
        self.message = message
        super().__init__(f"segment {segment!r}: field {field!r}: {message}")


@dataclass(frozen=True)
class Device:
    """An RDMA NIC of the publisher (rdma form only)."""

    name: str
    gid: str
    lid: int = 0
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class Buffer:
    """A registered memory region. ``lkey``/``rkey`` hold one key per device (rdma form)."""

    name: str
    addr: int
    length: int
    lkey: tuple[int, ...] | None = None
    rkey: tuple[int, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @property
    def end(self) -> int:
        return self.addr + self.length

    def contains(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.end


@dataclass(frozen=True)
class SegmentDescriptor:
    """One complete, validated snapshot of a segment. ``None`` means the key was absent."""

    name: str
    protocol: str
    buffers: tuple[Buffer, ...] = ()
    devices: tuple[Device, ...] | None = None
    priority_matrix: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] | None = None
    tcp_data_host: str | None = None
    tcp_data_port: int | None = None
    tcp_proto_version: int | None = None
    rdma_server_name: str | None = None
    timestamp: str | None = None
    instance_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @property
    def is_legacy(self) -> bool:
        """True for a publisher that predates the RFC (no ``instance_id``)."""
        return self.instance_id is None

    def data_endpoint(self) -> tuple[str, int]:
        """``(tcp_data_host, tcp_data_port)``. A descriptor without ``tcp_data_host`` (Mooncake
        0.3.11, 0.3.12) does not say where its data port is: readers ask the segment's RPC
        entry, as Mooncake's do (``engine/peer_locations.py``), never the segment name."""
        if not self.tcp_data_host:
            raise LookupError(f"segment {self.name!r} publishes no tcp_data_host; its RPC entry "
                              f"(rpc_meta) says where it listens")
        return self.tcp_data_host, self.tcp_data_port or 0

    def find_buffer(self, addr: int, length: int) -> Buffer | None:
        for buf in self.buffers:
            if buf.contains(addr, length):
                return buf
        return None

    def same_resources(self, other: SegmentDescriptor) -> bool:
        """Equality as Mooncake's cache sync sees it: everything but timestamp and proto version."""
        return replace(self, timestamp=None, tcp_proto_version=None) == replace(
            other, timestamp=None, tcp_proto_version=None
        )


def segment_host(name: str) -> str:
    """The host part of a ``host:port`` segment name (last ``:``; IPv6 may be bracketed)."""
    host = name.rsplit(":", 1)[0] if ":" in name else name
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def mooncake_timestamp(now: datetime | None = None) -> str:
    """Mooncake's timestamp format: local time with six-digit microseconds."""
    return (now or datetime.now()).strftime("%Y-%m-%d %H:%M:%S.%f")


# ---------------------------------------------------------------------------------- decode


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    pass


class _Checker:
    """Type and range checks that name the segment and the field path."""

    def __init__(self, segment: str):
        self.segment = segment

    def fail(self, path: str, message: str) -> DescriptorError:
        return DescriptorError(self.segment, path, message)

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def array(self, value: Any, path: str, limit: int) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected an array, got {_kind(value)}")
        if len(value) > limit:
            raise self.fail(path, f"{len(value)} entries exceed the limit of {limit}")
        return value

    def string(self, value: Any, path: str, nonempty: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_kind(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def integer(self, value: Any, path: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(path, f"{value} is outside [{low}, {high}]")
        return value

    def keys(self, value: Any, path: str) -> tuple[int, ...]:
        items = self.array(value, path, MAX_DEVICES)
        return tuple(self.integer(v, f"{path}[{i}]", 0, U32) for i, v in enumerate(items))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def _rest(obj: Mapping[str, Any], known: Iterable[str]) -> Mapping[str, Any]:
    known = set(known)
    rest = {k: v for k, v in obj.items() if k not in known}
    return MappingProxyType(rest) if rest else _EMPTY


_TOP_KEYS = ("name", "protocol", "buffers", "devices", "priority_matrix", "tcp_data_host",
             "tcp_data_port", "tcp_proto_version", "rdma_server_name", "timestamp", "instance_id")
_BUFFER_KEYS = ("name", "addr", "length", "lkey", "rkey")
_DEVICE_KEYS = ("name", "gid", "lid")


def decode(raw: bytes, segment: str = "?") -> SegmentDescriptor:
    """Decode and validate one metadata value. ``segment`` names it in errors."""
    check = _Checker(segment)
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise check.fail("<raw>", f"expected bytes, got {type(raw).__name__}")
    if len(raw) > MAX_RAW_BYTES:
        raise check.fail("<raw>", f"{len(raw)} bytes exceed the limit of {MAX_RAW_BYTES}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise check.fail("<raw>", f"not UTF-8 at byte {exc.start}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_reject_duplicates)
    except _DuplicateKey as exc:
        raise check.fail(str(exc), "key appears more than once") from None
    except (ValueError, RecursionError) as exc:
        raise check.fail("<json>", f"not valid JSON: {exc}") from None
    return from_json(doc, segment)


def from_json(doc: Any, segment: str = "?") -> SegmentDescriptor:
    """Validate an already-parsed JSON document as a descriptor."""
    check = _Checker(segment)
    top = check.obj(doc, "<root>")
    if "name" not in top:
        raise check.fail("name", "missing")
    name = check.string(top["name"], "name")
    if "protocol" not in top:
        raise check.fail("protocol", "missing")
    protocol = check.string(top["protocol"], "protocol")
    if protocol not in KNOWN_PROTOCOLS:
        raise check.fail("protocol", f"unknown protocol {protocol!r}")

    def opt_str(key: str) -> str | None:
        return check.string(top[key], key) if key in top else None

    def opt_int(key: str, low: int, high: int) -> int | None:
        return check.integer(top[key], key, low, high) if key in top else None

    devices = None
    if "devices" in top:
        devices = tuple(
            _device(check, d, f"devices[{i}]")
            for i, d in enumerate(check.array(top["devices"], "devices", MAX_DEVICES))
        )
    buffers = tuple(
        _buffer(check, b, f"buffers[{i}]", protocol, len(devices or ()))
        for i, b in enumerate(check.array(top.get("buffers", []), "buffers", MAX_BUFFERS))
    )
    _check_disjoint(check, buffers)

    instance_id = opt_str("instance_id")
    if instance_id is not None:
        if len(instance_id) > MAX_INSTANCE_ID_CHARS:
            raise check.fail("instance_id", f"longer than {MAX_INSTANCE_ID_CHARS} characters")
        if instance_id and not _INSTANCE_ID_RE.fullmatch(instance_id):
            raise check.fail("instance_id", "must be printable ASCII without spaces")
        instance_id = instance_id or None

    return SegmentDescriptor(
        name=name,
        protocol=protocol,
        buffers=buffers,
        devices=devices,
        priority_matrix=(
            _priority_matrix(check, top["priority_matrix"]) if "priority_matrix" in top else None
        ),
        tcp_data_host=opt_str("tcp_data_host"),
        tcp_data_port=opt_int("tcp_data_port", 0, 65535),
        tcp_proto_version=opt_int("tcp_proto_version", 0, 1 << 16),
        rdma_server_name=opt_str("rdma_server_name"),
        timestamp=opt_str("timestamp"),
        instance_id=instance_id,
        extra=_rest(top, _TOP_KEYS),
    )


def _device(check: _Checker, value: Any, path: str) -> Device:
    obj = check.obj(value, path)
    return Device(
        name=check.string(obj.get("name"), f"{path}.name", nonempty=True),
        gid=check.string(obj.get("gid"), f"{path}.gid", nonempty=True),
        lid=check.integer(obj.get("lid", 0), f"{path}.lid", 0, 0xFFFF),
        extra=_rest(obj, _DEVICE_KEYS),
    )


def _buffer(check: _Checker, value: Any, path: str, protocol: str, n_devices: int) -> Buffer:
    obj = check.obj(value, path)
    name = check.string(obj.get("name"), f"{path}.name", nonempty=True)
    addr = check.integer(obj.get("addr"), f"{path}.addr", 1, U64)
    length = check.integer(obj.get("length"), f"{path}.length", 1, MAX_BUFFER_LENGTH)
    if addr + length - 1 > U64:
        raise check.fail(f"{path}.length", "addr + length overflows 64 bits")
    lkey = check.keys(obj["lkey"], f"{path}.lkey") if "lkey" in obj else None
    rkey = check.keys(obj["rkey"], f"{path}.rkey") if "rkey" in obj else None
    if rkey:
        if len(rkey) != len(lkey or ()):
            raise check.fail(f"{path}.rkey", f"{len(rkey)} rkeys but {len(lkey or ())} lkeys")
        if protocol in KEY_COUNT_CHECKED and len(rkey) != n_devices:
            raise check.fail(f"{path}.rkey", f"{len(rkey)} rkeys but {n_devices} devices")
    return Buffer(name=name, addr=addr, length=length, lkey=lkey, rkey=rkey,
                  extra=_rest(obj, _BUFFER_KEYS))


def _check_disjoint(check: _Checker, buffers: tuple[Buffer, ...]) -> None:
    order = sorted(range(len(buffers)), key=lambda i: buffers[i].addr)
    for prev, cur in zip(order, order[1:], strict=False):
        if buffers[cur].addr < buffers[prev].end:
            raise check.fail(
                f"buffers[{cur}].addr",
                f"overlaps buffers[{prev}] [{buffers[prev].addr:#x}, {buffers[prev].end:#x})",
            )


def _priority_matrix(check: _Checker, value: Any) -> Mapping[str, tuple[tuple[str, ...], ...]]:
    obj = check.obj(value, "priority_matrix")
    out = {}
    for loc, entry in obj.items():
        path = f"priority_matrix[{loc!r}]"
        lists = check.array(entry, path, 2)
        if len(lists) != 2:
            raise check.fail(path, "expected [preferred, available]")
        out[loc] = tuple(
            tuple(check.string(n, f"{path}[{j}][{k}]", nonempty=True)
                  for k, n in enumerate(check.array(lst, f"{path}[{j}]", MAX_DEVICES)))
            for j, lst in enumerate(lists)
        )
    return MappingProxyType(out)


# ---------------------------------------------------------------------------------- encode


def to_json(desc: SegmentDescriptor) -> dict[str, Any]:
    """The JSON object of a descriptor (absent optional fields left out)."""
    doc: dict[str, Any] = dict(desc.extra)
    doc["name"] = desc.name
    doc["protocol"] = desc.protocol
    doc["buffers"] = [_buffer_json(b) for b in desc.buffers]
    if desc.devices is not None:
        doc["devices"] = [{**d.extra, "name": d.name, "lid": d.lid, "gid": d.gid}
                          for d in desc.devices]
    if desc.priority_matrix is not None:
        doc["priority_matrix"] = {k: [list(v[0]), list(v[1])]
                                  for k, v in desc.priority_matrix.items()}
    for key in ("tcp_data_host", "tcp_data_port", "tcp_proto_version", "rdma_server_name",
                "timestamp", "instance_id"):
        value = getattr(desc, key)
        if value is not None:
            doc[key] = value
    return doc


def _buffer_json(buf: Buffer) -> dict[str, Any]:
    doc = {**buf.extra, "name": buf.name, "addr": buf.addr, "length": buf.length}
    if buf.lkey is not None:
        doc["lkey"] = list(buf.lkey)
    if buf.rkey is not None:
        doc["rkey"] = list(buf.rkey)
    return doc


def encode(desc: SegmentDescriptor, newline: bool = True) -> bytes:
    """Compact JSON with sorted keys, as jsoncpp writes it (etcd values end with a newline)."""
    text = json.dumps(to_json(desc), sort_keys=True, separators=(",", ":"))
    return (text + "\n" if newline else text).encode("utf-8")


# ---------------------------------------------------------------------------------- build


def tcp_descriptor(
    name: str,
    buffers: Iterable[tuple[int, int]],
    data_host: str,
    data_port: int,
    instance_id: str | None,
    buffer_name: str = "cpu:0",
) -> SegmentDescriptor:
    """A fresh tcp-form descriptor in the release (0.3.13) form, from our own buffers only."""
    return SegmentDescriptor(
        name=name,
        protocol=TCP,
        buffers=tuple(Buffer(name=buffer_name, addr=a, length=n) for a, n in buffers),
        tcp_data_host=data_host,
        tcp_data_port=data_port,
        tcp_proto_version=2,
        rdma_server_name="",
        timestamp=mooncake_timestamp(),
        instance_id=instance_id,
    )


__all__ = [
    "Buffer", "Device", "DescriptorError", "SegmentDescriptor", "MAX_RAW_BYTES",
    "KNOWN_PROTOCOLS", "decode", "encode", "from_json", "to_json", "tcp_descriptor",
    "segment_host", "mooncake_timestamp",
]
