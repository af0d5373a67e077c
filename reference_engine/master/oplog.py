"""OpLog entries and their etcd form, as Mooncake's batch-record mode stores them.

Keys: ``/oplog/<cluster>/batches/<batch_id:020d>``, ``/oplog/<cluster>/durable_prefix`` and
``/oplog/<cluster>/producer_view``. A batch record is the compact JSON array
``[1, batch_id, first_seq, last_seq, [[op_type, tenant, key, base64(payload)], ...], checksum]``
with checksum = XXH32 of the compact JSON of the first five elements. Payloads here are compact
JSON (Mooncake uses struct_pack; the reference engine's own peers are the only readers).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import re
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

from reference_engine.master.xxh32 import xxh32

SCHEMA_VERSION = 1
MAX_KEY_BYTES = 4096
MAX_PAYLOAD_BYTES = 10 * 1024 * 1024
DEFAULT_TENANT = "default"
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class OpType(enum.IntEnum):
    PUT_END = 1
    PUT_REVOKE = 2
    REMOVE = 3
    LEASE_RENEW = 4
    SEGMENT_MOUNT = 5
    SEGMENT_UNMOUNT = 6
    SEGMENT_UPDATE = 7


class OpLogCodecError(ValueError):
    """A stored record that does not decode; the message names the key and the field."""


class OpLogEntry(NamedTuple):
    sequence_id: int
    op_type: OpType
    object_key: str
    payload: bytes = b""
    tenant_id: str = DEFAULT_TENANT

    def payload_json(self) -> Any:
        return json.loads(self.payload) if self.payload else None


def encode_payload(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class DurablePrefix:
    batch_id: int = 0
    last_seq: int = 0

    def encode(self) -> bytes:
        return _compact({"schema_version": SCHEMA_VERSION, "batch_id": self.batch_id,
                         "last_seq": self.last_seq})

    @classmethod
    def decode(cls, raw: bytes, where: str = "durable_prefix") -> DurablePrefix:
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise OpLogCodecError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise OpLogCodecError(f"{where}: not a JSON object")
        if obj.get("schema_version") != SCHEMA_VERSION:
            raise OpLogCodecError(f"{where}.schema_version: {obj.get('schema_version')!r} != 1")
        batch_id, last_seq = obj.get("batch_id"), obj.get("last_seq")
        for name, value in (("batch_id", batch_id), ("last_seq", last_seq)):
            if not _is_uint(value):
                raise OpLogCodecError(f"{where}.{name}: not a non-negative integer")
        if (batch_id == 0) != (last_seq == 0):
            raise OpLogCodecError(f"{where}: batch_id and last_seq must be both zero or both non-zero")
        return cls(batch_id, last_seq)


@dataclass(frozen=True)
class BatchRecord:
    batch_id: int
    first_seq: int
    entries: tuple[OpLogEntry, ...]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.entries) - 1

    def encode(self) -> bytes:
        body = [
            SCHEMA_VERSION, self.batch_id, self.first_seq, self.last_seq,
            [[int(e.op_type), e.tenant_id, e.object_key, base64.b64encode(e.payload).decode()]
             for e in self.entries],
        ]
        head = _compact(body)
        return head[:-1] + b"," + str(xxh32(head)).encode() + b"]"

    @classmethod
    def decode(cls, raw: bytes, where: str = "batch") -> BatchRecord:
        try:
            arr = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise OpLogCodecError(f"{where}: not JSON ({exc})") from None
        if not isinstance(arr, list) or len(arr) != 6:
            raise OpLogCodecError(f"{where}: not a 6-element array")
        version, batch_id, first_seq, last_seq, items, checksum = arr
        if version != SCHEMA_VERSION:
            raise OpLogCodecError(f"{where}.schema_version: {version!r} != 1")
        for name, value in (("batch_id", batch_id), ("first_seq", first_seq), ("last_seq", last_seq)):
            if not _is_uint(value) or value < 1:
                raise OpLogCodecError(f"{where}.{name}: not a positive integer")
        if not isinstance(items, list) or not items:
            raise OpLogCodecError(f"{where}.entries: not a non-empty list")
        if last_seq - first_seq != len(items) - 1:
            raise OpLogCodecError(f"{where}: last_seq - first_seq != entry count - 1")
        if not _is_uint(checksum) or xxh32(_compact(arr[:5])) != checksum:
            raise OpLogCodecError(f"{where}.checksum: mismatch")
        entries = []
        ops = _OP_TYPES
        for i, item in enumerate(items):
            try:
                op, tenant, key, b64 = item
                op_type = ops[op]
                if type(tenant) is not str or type(key) is not str:
                    raise TypeError
                payload = _b64decode(b64)
                if b64.endswith("=") and _b64encode(payload) != b64:
                    raise ValueError
                if len(key) > MAX_KEY_BYTES // 4 and len(key.encode()) > MAX_KEY_BYTES:
                    raise OverflowError
                if len(payload) > MAX_PAYLOAD_BYTES:
                    raise OverflowError
            except (TypeError, ValueError, KeyError, OverflowError, binascii.Error):
                raise OpLogCodecError(_entry_problem(item, f"{where}.entries[{i}]")) from None
            entries.append(OpLogEntry(first_seq + i, op_type, key, payload, tenant))
        return cls(batch_id, first_seq, tuple(entries))


@dataclass(frozen=True)
class OpLogKeys:
    """The etcd keys of one cluster's OpLog."""

    cluster: str

    def __post_init__(self) -> None:
        normalized = self.cluster.rstrip("/")
        if not _CLUSTER_RE.match(normalized):
            raise ValueError(
                f"cluster id {self.cluster!r}: use 1-128 characters of [A-Za-z0-9_.-]"
            )
        object.__setattr__(self, "cluster", normalized)

    @property
    def root(self) -> str:
        return f"/oplog/{self.cluster}/"

    @property
    def batches_prefix(self) -> str:
        return f"{self.root}batches/"

    def batch(self, batch_id: int) -> str:
        return f"{self.batches_prefix}{batch_id:020d}"

    @property
    def durable_prefix(self) -> str:
        return f"{self.root}durable_prefix"

    @property
    def producer_view(self) -> str:
        return f"{self.root}producer_view"


def master_view_key(cluster: str) -> str:
    """The leader key Mooncake's etcd coordinator campaigns on."""
    return f"mooncake-store/{cluster.rstrip('/')}/master_view"


_OP_TYPES = {int(op): op for op in OpType}


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


if sys.version_info >= (3, 11):
    def _b64decode(text: str) -> bytes:
        return binascii.a2b_base64(text, strict_mode=True)
else:  # pragma: no cover
    def _b64decode(text: str) -> bytes:
        return base64.b64decode(text, validate=True)


def _entry_problem(item: Any, at: str) -> str:
    if not isinstance(item, list) or len(item) != 4:
        return f"{at}: not [op_type, tenant, key, payload]"
    op, tenant, key, b64 = item
    if op not in _OP_TYPES:
        return f"{at}.op_type: unknown {op!r}"
    if not isinstance(tenant, str) or not isinstance(key, str) or not isinstance(b64, str):
        return f"{at}: tenant, key and payload must be strings"
    if len(key.encode()) > MAX_KEY_BYTES:
        return f"{at}.object_key: longer than {MAX_KEY_BYTES} bytes"
    try:
        payload = _b64decode(b64)
    except (binascii.Error, ValueError):
        return f"{at}.payload: not canonical base64"
    if _b64encode(payload) != b64:
        return f"{at}.payload: not canonical base64"
    return f"{at}.payload: larger than {MAX_PAYLOAD_BYTES} bytes"


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
