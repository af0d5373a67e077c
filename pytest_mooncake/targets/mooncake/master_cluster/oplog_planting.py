"""Entries planted in the OpLog a Mooncake HA leader keeps in etcd, which its standbys replay
(MP-1, MP-2): the build has no admin endpoint for a fault, but its replicated state is a set of
etcd keys anyone on that etcd can append to.

The layout (0.3.13, 0.3.14; read from the build's source and checked against what a running
master writes): ``/oplog/<cluster>/durable_prefix`` holds ``{"batch_id","last_seq",
"schema_version"}``; ``/oplog/<cluster>/batches/<batch_id, 20 digits>`` holds a compact JSON array
``[schema, batch_id, first_seq, last_seq, [[op_type, tenant, key, base64(payload)], ...],
checksum]`` whose checksum is XXH32 (seed 0) of the compact JSON of the first five elements. A
planted batch is the next one: batch ``prefix.batch_id + 1`` starting at ``prefix.last_seq + 1``,
written with the advanced prefix in one etcd transaction that compares the prefix it read (so a
leader's own write in between is never overwritten; the planter reads again and retries).

Nothing is assumed about a build: ``OpLogInEtcd.unplantable`` decodes the build's own records
with this encoding and says why planting is impossible (no prefix, no batches, a record this
codec does not reproduce byte for byte), which is the n/a reason of a build that keeps no such
OpLog. The leader is not told: its next OpLog write finds the prefix moved and fails (0.3.13
logs "OpLog queue failed" for later puts and still acknowledges them).

The codec is this module's own although reference_engine/master/oplog.py encodes the same
records: the layer rules (DESIGN.md) keep reference_engine out of the mooncake targets."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from typing import Any

import xxhash

from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc import type_literal
from pytest_mooncake.runtime.deadlines import wait_until
from pytest_mooncake.runtime.etcd_process import etcd_client

OPLOG_ROOT = "/oplog/"
SCHEMA_VERSION = 1
PUT_END = 1
"""OpType of a completed put; its payload is the object's metadata (replicas, descriptors)."""
REMOVE = 3
"""OpType of a removed object (its payload empty in the builds' source); planted only modelled on
a REMOVE the build itself logged (``plant_removal``)."""
APPEND_TIMEOUT = 10.0


def compact_json(value: Any) -> bytes:
    """JSON as jsoncpp writes it with no indentation: no spaces, object keys sorted, non-ASCII
    escaped (``OpLogInEtcd.unplantable`` checks the build's records come out the same)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode()


@dataclass(frozen=True)
class OpLogEntry:
    op_type: int
    tenant: str
    key: str
    payload: bytes

    def as_json(self) -> list[Any]:
        return [self.op_type, self.tenant, self.key, base64.b64encode(self.payload).decode()]


@dataclass(frozen=True)
class BatchRecord:
    batch_id: int
    first_seq: int
    entries: tuple[OpLogEntry, ...]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.entries) - 1

    def head(self) -> list[Any]:
        return [SCHEMA_VERSION, self.batch_id, self.first_seq, self.last_seq,
                [e.as_json() for e in self.entries]]

    def checksum(self) -> int:
        return xxhash.xxh32_intdigest(compact_json(self.head()), 0)

    def encode(self) -> bytes:
        return compact_json([*self.head(), self.checksum()])


class UndecodableBatch(ValueError):
    """A batch record this codec cannot read or would not write the same way."""


def decode_batch(raw: bytes) -> BatchRecord:
    """The record ``raw`` as this codec reads it; ``UndecodableBatch`` naming what differs when
    it is not a schema-1 record whose checksum and bytes this codec reproduces."""
    try:
        doc = json.loads(raw)
        schema, batch_id, first_seq, last_seq, entries, checksum = doc
        record = BatchRecord(int(batch_id), int(first_seq), tuple(
            OpLogEntry(int(op), str(tenant), str(key), base64.b64decode(payload, validate=True))
            for op, tenant, key, payload in entries))
    except (ValueError, TypeError) as exc:
        raise UndecodableBatch(f"not a six-element batch array ({exc}): {raw[:160]!r}") from exc
    if schema != SCHEMA_VERSION or record.last_seq != last_seq:
        raise UndecodableBatch(f"schema {schema} (this codec writes {SCHEMA_VERSION}), "
                               f"sequences {first_seq}..{last_seq} for {len(entries)} entries")
    if record.checksum() != checksum:
        raise UndecodableBatch(f"its checksum {checksum} is not XXH32 of its head "
                               f"({record.checksum()})")
    if record.encode() != raw:
        raise UndecodableBatch(f"re-encoded it differs: {record.encode()[:160]!r} "
                               f"vs {raw[:160]!r}")
    return record


class OpLogInEtcd:
    """One cluster's batch OpLog in etcd, read and appended to from outside the masters."""

    def __init__(self, endpoints: list[str], cluster: str):
        self.endpoints = list(endpoints)
        self.cluster = cluster.rstrip("/")
        self.root = f"{OPLOG_ROOT}{self.cluster}/"
        self.prefix_key = self.root + "durable_prefix"
        self._etcd = etcd_client(self.endpoints[0], timeout=5)

    def close(self) -> None:
        self._etcd.close()

    def batch_key(self, batch_id: int) -> str:
        return f"{self.root}batches/{batch_id:020d}"

    def prefix(self) -> tuple[bytes, dict[str, Any]] | None:
        """The durable prefix as stored (raw, decoded), None when there is none."""
        raw, _ = self._etcd.get(self.prefix_key)
        return None if raw is None else (raw, json.loads(raw))

    def raw_batches(self) -> list[tuple[str, bytes]]:
        found = self._etcd.get_prefix(self.root + "batches/")
        return sorted((meta.key.decode(), value) for value, meta in found)

    def batches(self) -> list[BatchRecord]:
        return [decode_batch(raw) for _, raw in self.raw_batches()]

    def unplantable(self) -> str | None:
        """Why nothing can be planted in this build's OpLog (None: it can), from what the
        running masters wrote: the durable prefix and every batch record, decoded and
        re-encoded by this codec."""
        prefix = self.prefix()
        if prefix is None:
            others = sorted({m.key.decode() for _, m in self._etcd.get_prefix(OPLOG_ROOT)})
            return (f"its masters wrote no {self.prefix_key} (keys under {OPLOG_ROOT}: "
                    f"{', '.join(others[:5]) or 'none'}): they keep no batch OpLog in etcd")
        raw_prefix, doc = prefix
        if set(doc) != {"batch_id", "last_seq", "schema_version"} or \
                compact_json(doc) != raw_prefix:
            return f"its durable prefix is not the encoding this planter writes: {raw_prefix!r}"
        records = self.raw_batches()
        if not records:
            return f"its durable prefix {raw_prefix!r} stands beside no batch records"
        for key, raw in records:
            try:
                decode_batch(raw)
            except UndecodableBatch as exc:
                return f"its batch record {key} is not the encoding this planter writes: {exc}"
        return None

    def append(self, entries: list[OpLogEntry], timeout: float = APPEND_TIMEOUT) -> int:
        """Write ``entries`` as the next batch and advance the durable prefix past them, in one
        transaction on the prefix as read (retried while the leader moves it); the sequence id
        of the last entry."""
        done: list[int] = []

        def attempt() -> bool:
            raw_prefix, doc = self.prefix() or (None, {"batch_id": 0, "last_seq": 0})
            record = BatchRecord(int(doc["batch_id"]) + 1, int(doc["last_seq"]) + 1,
                                 tuple(entries))
            new_prefix = compact_json({"batch_id": record.batch_id, "last_seq": record.last_seq,
                                       "schema_version": SCHEMA_VERSION})
            txn = self._etcd.transactions
            compare = (txn.version(self.prefix_key) == 0 if raw_prefix is None
                       else txn.value(self.prefix_key) == raw_prefix)
            ok, _ = self._etcd.transaction(
                compare=[compare, txn.version(self.batch_key(record.batch_id)) == 0],
                success=[txn.put(self.batch_key(record.batch_id), record.encode()),
                         txn.put(self.prefix_key, new_prefix)], failure=[])
            if ok:
                done.append(record.last_seq)
            return ok

        wait_until(attempt, timeout, f"a planted batch appended after {self.prefix_key}")
        return done[0]


def overlapping_address(address: int, size: int) -> int:
    """Where a copy of ``[address, +size)`` overlaps the original without coinciding: half its
    size up (one byte for a one-byte object)."""
    return address + max(1, size // 2)


def shifted_descriptor(payload: bytes, address: int, size: int) -> tuple[bytes, str]:
    """``payload`` (a PUT_END's metadata, struct_pack) with its buffer ``address`` moved half the
    object's ``size`` up, so the copy overlaps the original without coinciding; the payload
    unchanged (the same range, which overlaps as well) when the address is not found exactly
    once as a little-endian u64. Returns the payload and what the planted descriptor is."""
    needle = address.to_bytes(8, "little")
    if payload.count(needle) != 1:
        return payload, f"the same range [{address:#x}, +{size})"
    moved = overlapping_address(address, size)
    return (payload.replace(needle, moved.to_bytes(8, "little")),
            f"[{moved:#x}, +{size}) over [{address:#x}, +{size})")


def moved_to_unmounted_segment(payload: bytes, endpoint: str, mounted: set[str]) -> tuple[bytes, str]:
    """``payload`` (a PUT_END's metadata) with its replica's transport ``endpoint`` replaced by
    one of the same length (the same host, another port) that no segment in ``mounted`` has, so
    struct_pack's length prefix still holds. ``ValueError`` when the endpoint is not found
    exactly once."""
    needle = endpoint.encode()
    if payload.count(needle) != 1:
        raise ValueError(f"the endpoint {endpoint!r} occurs {payload.count(needle)} times in the "
                         f"victim's metadata, not once")
    other = unmounted_endpoint(endpoint, mounted)
    return payload.replace(needle, other.encode()), f"on {other}, a segment nobody mounted"


def unmounted_endpoint(endpoint: str, mounted: set[str]) -> str:
    """An endpoint of the same length as ``endpoint`` (the same host, another port with as many
    digits) that no segment in ``mounted`` has."""
    host, _, port = endpoint.rpartition(":")
    low, high = 10 ** (len(port) - 1), 10 ** len(port)
    return next(f"{host}:{p}" for p in (*range(int(port) + 1, high), *range(low, int(port)))
                if f"{host}:{p}" not in mounted)


# ------------------------------------------------------------------------- object metadata


class UndecodablePayload(ValueError):
    """A PUT_END payload this codec cannot read or would not write the same way."""


@dataclass(frozen=True)
class ObjectPayload:
    """A PUT_END payload (the object's metadata, struct_pack) read through the type literal
    the build sends with it (0.3.13.post1 and 0.3.14 do: metainfo 0x05), with the codec of the
    master's own RPC (``master_rpc.struct_pack``, ``type_literal``). ``value`` is the object
    as that literal declares it: the writer's UUID, the size, the replica vector (each replica
    its id, its descriptor variant, memory first, and its status), by field position.

    The compatible members follow the value and the literal leaves them out, so their bytes
    are kept as written: each replica's first (``replica_tail``, one byte each on 0.3.14, an
    absent value; none on 0.3.13.post1: struct_pack writes them depth first, so a replica's
    come before the object's own), then the object's own (``tail``: group, data type, pin
    state, ..., which the builds write present). The total length is recomputed."""

    prefix: bytes
    """The hash and metainfo byte, as written."""
    literal: bytes
    width: int
    type: sp.Struct
    value: dict[str, Any]
    replicas_field: str
    replica_tail: bytes
    tail: bytes

    @property
    def replicas(self) -> list[Any]:
        return list(self.value[self.replicas_field])

    def with_replicas(self, replicas: list[Any]) -> ObjectPayload:
        return replace(self, value={**self.value, self.replicas_field: list(replicas)})

    def encode(self) -> bytes:
        if self.type.max_len(self.value) >= 1 << (8 * self.width):
            raise ValueError(f"a container of {self.type.max_len(self.value)} elements does not "
                             f"fit the payload's {self.width}-byte container lengths")
        data = bytearray()
        self.type.encode(self.value, data, self.width)
        data += self.replica_tail * len(self.replicas) + self.tail
        total_width = (0, 2, 4, 8)[self.prefix[4] & 3]
        total = len(self.prefix) + total_width + len(self.literal) + 1 + len(data)
        return (self.prefix + total.to_bytes(total_width, "little") + self.literal + b"\0"
                + bytes(data))


def decode_object_payload(payload: bytes) -> ObjectPayload:
    """``payload`` (a PUT_END's metadata) read through its own type literal;
    ``UndecodablePayload`` naming what differs where it sends no literal, does not hold one
    replica vector, or does not re-encode byte for byte."""
    try:
        head = sp.read_header(payload)
        if head.literal is None or head.total != len(payload):
            raise UndecodablePayload(
                f"its header ({payload[:8].hex()}...) sends no type literal or no total length "
                f"equal to its {len(payload)} bytes: not how the releases write object metadata")
        t = type_literal.parse(head.literal)
        if head.hash != sp.types_code(t) or not isinstance(t, sp.Struct):
            raise UndecodablePayload(f"its type hash {head.hash:#010x} is not that of the struct "
                                     f"its literal describes ({type_literal.describe(t)})")
        value, end = t.decode(memoryview(payload), head.payload_at, head.width)
    except (sp.StructPackError, type_literal.LiteralError) as exc:
        raise UndecodablePayload(f"not struct_pack object metadata: {exc}") from None
    vectors = [n for n, f in t.fields if isinstance(f, sp.Vector)]
    if len(vectors) != 1:
        raise UndecodablePayload(f"its literal ({type_literal.describe(t)}) holds "
                                 f"{len(vectors)} vectors, not the one replica vector")
    rest, count = payload[end:], len(value[vectors[0]])
    absent = len(rest) - len(rest.lstrip(b"\0"))
    each = absent // count if count else 0
    decoded = ObjectPayload(payload[:5], head.literal, head.width, t, value, vectors[0],
                            rest[:each], rest[each * count:])
    if decoded.encode() != payload:
        raise UndecodablePayload(f"re-encoded it differs: {decoded.encode().hex()} vs "
                                 f"{payload.hex()}")
    return decoded


def every_replica_overlapping(victim: bytes, spare: bytes, address: int,
                              size: int) -> tuple[bytes, str]:
    """An object of two replicas made from PUT_END payloads the build wrote, each overlapping
    the ``victim``'s memory ``[address, +size)``: the ``spare``'s replica moved onto exactly
    that range, then the victim's own moved half ``size`` up (MP-2's "that entry" when every
    replica of an object is invalid: the object goes). Returns the payload and what it holds."""
    planted, _ = beside_valid(victim, spare, address, size)
    object_ = decode_object_payload(planted)
    spare_replica, moved = object_.replicas
    on_victim = {**spare_replica, "f1": (0, {**spare_replica["f1"][1],
                                             "f0": {**memory_buffer(spare_replica),
                                                    "f1": address}})}
    shifted = memory_buffer(moved)["f1"]
    return (object_.with_replicas([on_victim, moved]).encode(),
            f"[{address:#x}, +{size}) and [{shifted:#x}, +{size}), both over "
            f"[{address:#x}, +{size})")


def replica_moved(victim: bytes, address: int, moved: int) -> tuple[bytes, str]:
    """The ``victim``'s PUT_END payload with its replica at buffer ``address`` moved to
    ``moved``, its size, segment and every other field as the build wrote them (by the end of
    its segment: ``base.at_segment_end``). Returns the payload and what its replica is;
    ``UndecodablePayload`` where no replica is at ``address``."""
    object_ = decode_object_payload(victim)
    replicas = object_.replicas
    buffer = _change_buffer(replicas, address, f1=moved)
    return (object_.with_replicas(replicas).encode(),
            f"[{moved:#x}, +{buffer['f0']}) on {buffer['f3']}, moved from [{address:#x}, "
            f"+{buffer['f0']})")


def zero_sized(victim: bytes, address: int) -> tuple[bytes, str]:
    """The ``victim``'s PUT_END payload with the object's size and the length of its replica at
    ``address`` set to 0 (the object's size is the field after the writer's id, a buffer's
    length its first field), everything else as the build wrote it: object metadata no put
    makes, whose descriptor Mooncake's restore refuses. ``UndecodablePayload`` where no replica
    is at ``address`` or the object's second field is no size."""
    object_ = decode_object_payload(victim)
    sizes = [memory_buffer(r)["f0"] for r in object_.replicas]
    names = [name for name, _ in object_.type.fields]
    if len(names) < 2 or object_.value[names[1]] not in sizes:
        raise UndecodablePayload(f"the object's second field is not its size (the replicas' "
                                 f"lengths are {sizes}): {object_.value}")
    replicas = object_.replicas
    buffer = _change_buffer(replicas, address, f0=0)
    zeroed = replace(object_, value={**object_.value, names[1]: 0})
    return (zeroed.with_replicas(replicas).encode(),
            f"size 0, [{address:#x}, +0) on {buffer['f3']}")


def _change_buffer(replicas: list[Any], address: int, **fields: Any) -> dict[str, Any]:
    """Set ``fields`` (f0: length, f1: address) of the buffer of the replica in ``replicas`` at
    buffer ``address``, in place, every other field kept; the new buffer.
    ``UndecodablePayload`` where no replica is at ``address``."""
    at = next((i for i, r in enumerate(replicas) if memory_buffer(r)["f1"] == address), None)
    if at is None:
        raise UndecodablePayload(f"no replica of the victim's metadata is at {address:#x}: "
                                 f"{replicas}")
    own = replicas[at]
    buffer = {**memory_buffer(own), **fields}
    replicas[at] = {**own, "f1": (0, {**own["f1"][1], "f0": buffer})}
    return buffer


def memory_buffer(replica: Any) -> dict[str, Any]:
    """The buffer descriptor (size, address, protocol, endpoint as fields f0..f3) of a memory
    replica as ``ObjectPayload`` reads it; ``UndecodablePayload`` for any other."""
    try:
        index, descriptor = replica["f1"]
        buffer = descriptor["f0"]
        if index == 0 and isinstance(buffer["f1"], int) and isinstance(buffer["f3"], str):
            return buffer
    except (KeyError, TypeError, ValueError):
        pass
    raise UndecodablePayload(f"replica {replica} is no memory replica")


def beside_valid(victim: bytes, spare: bytes, address: int, size: int,
                 elsewhere: str | None = None) -> tuple[bytes, str]:
    """An object of two replicas made from PUT_END payloads the build wrote: the ``spare``'s
    replica (memory of ``size`` bytes no object holds once the spare is removed) first, then
    the ``victim``'s own replica with its buffer ``address`` moved half ``size`` up, so it
    overlaps the victim's memory, or, given ``elsewhere`` (a segment endpoint nobody mounted),
    at the victim's address on that segment. Returns the payload and what its two replicas
    are."""
    object_ = decode_object_payload(victim)
    (valid,) = decode_object_payload(spare).replicas
    own = next((r for r in object_.replicas if memory_buffer(r)["f1"] == address), None)
    if own is None:
        raise UndecodablePayload(f"no replica of the victim's metadata is at {address:#x}: "
                                 f"{object_.replicas}")
    buffer = memory_buffer(own)
    if elsewhere is None:
        moved = overlapping_address(address, size)
        bad, said = {**buffer, "f1": moved}, f"[{moved:#x}, +{size}) over [{address:#x}, +{size})"
    else:
        bad, said = {**buffer, "f3": elsewhere}, f"[{address:#x}, +{size}) on {elsewhere}"
    invalid = {**own, "f1": (0, {**own["f1"][1], "f0": bad})}
    freed = memory_buffer(valid)
    return (object_.with_replicas([valid, invalid]).encode(),
            f"[{freed['f1']:#x}, +{freed['f0']}) on {freed['f3']}, freed, beside {said}")
