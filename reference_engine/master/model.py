"""The records the index is made of: memory descriptors, replicas, object metadata.

They double as the replicated form: ``to_wire``/``from_wire`` give the JSON shape that OpLog
payloads, snapshots and promotion contexts carry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class ReplicaStatus(str, enum.Enum):
    UNDEFINED = "UNDEFINED"
    INITIALIZED = "INITIALIZED"
    PROCESSING = "PROCESSING"
    COMPLETE = "COMPLETE"
    REMOVED = "REMOVED"
    FAILED = "FAILED"


U64_END = 1 << 64
"""Addresses, sizes and capacities are u64 in Mooncake: every range ends at or below 2^64."""


class WireError(ValueError):
    """A replicated record that does not decode; the message names the field."""


def u64_field(value: Any, where: str) -> int:
    """``value`` as a u64 (an integer, not a bool, from 0 to 2^64-1), else WireError naming
    ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < U64_END:
        raise WireError(f"{where}: not an integer from 0 to 2^64-1")
    return value


def u64_range(base: int, length: int, where: str) -> None:
    """A range ``[base, base+length)`` must end within the u64 address space."""
    if base + length > U64_END:
        raise WireError(f"{where}: range 0x{base:x}+{length} ends beyond 2^64")


class MemoryDescriptor(NamedTuple):
    """A range of a mounted memory segment holding one replica's bytes."""

    endpoint: str
    address: int
    size: int

    @property
    def end(self) -> int:
        return self.address + self.size

    def to_wire(self) -> list[Any]:
        return [self.endpoint, self.address, self.size]

    @classmethod
    def from_wire(cls, raw: Any, where: str) -> MemoryDescriptor:
        if not (isinstance(raw, list) and len(raw) == 3):
            raise WireError(f"{where}: descriptor must be [endpoint, address, size]")
        endpoint, address, size = raw
        if not isinstance(endpoint, str):
            raise WireError(f"{where}.endpoint: not a string")
        u64_field(address, f"{where}.address")
        u64_field(size, f"{where}.size")
        u64_range(address, size, where)
        return cls(endpoint, address, size)


@dataclass(slots=True)
class Replica:
    id: int
    status: ReplicaStatus
    descriptors: tuple[MemoryDescriptor, ...]

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status.value,
            "descriptors": [d.to_wire() for d in self.descriptors],
        }

    @classmethod
    def from_wire(cls, raw: Any, where: str) -> Replica:
        if not isinstance(raw, dict):
            raise WireError(f"{where}: replica must be an object")
        rid = raw.get("id")
        if not isinstance(rid, int) or isinstance(rid, bool):
            raise WireError(f"{where}.id: not an integer")
        try:
            status = ReplicaStatus(raw.get("status"))
        except ValueError:
            raise WireError(f"{where}.status: unknown {raw.get('status')!r}") from None
        descs = raw.get("descriptors")
        if not isinstance(descs, list):
            raise WireError(f"{where}.descriptors: not a list")
        return cls(
            rid,
            status,
            tuple(
                MemoryDescriptor.from_wire(d, f"{where}.descriptors[{i}]")
                for i, d in enumerate(descs)
            ),
        )


@dataclass(slots=True)
class ObjectMeta:
    key: str
    size: int
    client_id: str
    replicas: list[Replica]
    put_start_time: float = 0.0
    lease_until: float = 0.0
    """Monotonic time until which a read lease protects the object from removal."""
    complete: bool = False

    def readable_replicas(self) -> list[Replica]:
        return [r for r in self.replicas if r.status is ReplicaStatus.COMPLETE]

    def to_wire(self) -> dict[str, Any]:
        """The PUT_END payload: everything but leases and timestamps (not replicated)."""
        return {
            "client_id": self.client_id,
            "size": self.size,
            "replicas": [r.to_wire() for r in self.replicas],
        }

    @classmethod
    def from_wire(cls, key: str, raw: Any) -> ObjectMeta:
        where = f"object {key!r}"
        if not isinstance(raw, dict):
            raise WireError(f"{where}: metadata must be an object")
        size = u64_field(raw.get("size"), f"{where}.size")
        client_id = raw.get("client_id", "")
        if not isinstance(client_id, str):
            raise WireError(f"{where}.client_id: not a string")
        replicas = raw.get("replicas")
        if not isinstance(replicas, list):
            raise WireError(f"{where}.replicas: not a list")
        return cls(
            key=key,
            size=size,
            client_id=client_id,
            replicas=[Replica.from_wire(r, f"{where}.replicas[{i}]") for i, r in enumerate(replicas)],
            complete=True,
        )


@dataclass
class SegmentInfo:
    """A mounted memory segment as replicated (SEGMENT_MOUNT payload)."""

    name: str
    endpoint: str
    base: int
    capacity: int
    client_id: str = ""
    is_memory_segment: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "segment_name": self.name,
            "transport_endpoint": self.endpoint,
            "base": self.base,
            "capacity": self.capacity,
            "client_id": self.client_id,
            "is_memory_segment": self.is_memory_segment,
        }

    @classmethod
    def from_wire(cls, raw: Any) -> SegmentInfo:
        if not isinstance(raw, dict):
            raise WireError("segment: must be an object")
        name = raw.get("segment_name")
        endpoint = raw.get("transport_endpoint")
        if not isinstance(name, str):
            raise WireError("segment.segment_name: not a string")
        if not isinstance(endpoint, str):
            raise WireError("segment.transport_endpoint: not a string")
        base = raw.get("base", 0)
        capacity = raw.get("capacity")
        for fname, value in (("base", base), ("capacity", capacity)):
            u64_field(value, f"segment {endpoint[:80]!r}.{fname}")
        u64_range(base, capacity, f"segment {endpoint[:80]!r}")
        client_id = raw.get("client_id", "")
        return cls(
            name=name,
            endpoint=endpoint,
            base=base,
            capacity=capacity,
            client_id=client_id if isinstance(client_id, str) else "",
            is_memory_segment=bool(raw.get("is_memory_segment", True)),
        )
