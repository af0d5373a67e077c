"""Mounted memory segments: a range allocator each, and the drain lifecycle.

OK (allocatable) -> DRAINING (readable, no new allocations) -> DRAINED (no replica left)
-> UNMOUNTING (being removed). A segment is keyed by its transport endpoint, as Mooncake's
replicated segment registry is.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.model import SegmentInfo


class SegmentStatus(str, enum.Enum):
    OK = "OK"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    UNMOUNTING = "UNMOUNTING"


_ALLOWED = {
    SegmentStatus.OK: {SegmentStatus.DRAINING, SegmentStatus.UNMOUNTING},
    SegmentStatus.DRAINING: {SegmentStatus.DRAINED, SegmentStatus.OK, SegmentStatus.UNMOUNTING},
    SegmentStatus.DRAINED: {SegmentStatus.UNMOUNTING},
    SegmentStatus.UNMOUNTING: set(),
}


class RangeAllocator:
    """First-fit allocator over ``[base, base+capacity)`` with coalescing frees."""

    def __init__(self, base: int, capacity: int):
        self.base = base
        self.capacity = capacity
        self._starts: list[int] = [base] if capacity else []
        self._ends: list[int] = [base + capacity] if capacity else []
        self.used = 0

    def allocate(self, size: int) -> int | None:
        if size <= 0:
            return None
        for i, (start, end) in enumerate(zip(self._starts, self._ends, strict=True)):
            if end - start >= size:
                if end - start == size:
                    del self._starts[i]
                    del self._ends[i]
                else:
                    self._starts[i] = start + size
                self.used += size
                return start
        return None

    def reserve(self, address: int, size: int) -> bool:
        """Take exactly ``[address, address+size)`` (restore); False if any part is not free."""
        i = bisect.bisect_right(self._starts, address) - 1
        if size <= 0 or i < 0 or self._ends[i] < address + size:
            return False
        start, end = self._starts[i], self._ends[i]
        del self._starts[i]
        del self._ends[i]
        pieces = [(start, address), (address + size, end)]
        for s, e in reversed(pieces):
            if e > s:
                self._starts.insert(i, s)
                self._ends.insert(i, e)
        self.used += size
        return True

    def free(self, address: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, address)
        self._starts.insert(i, address)
        self._ends.insert(i, address + size)
        if i + 1 < len(self._starts) and self._ends[i] == self._starts[i + 1]:
            self._ends[i] = self._ends[i + 1]
            del self._starts[i + 1]
            del self._ends[i + 1]
        if i > 0 and self._ends[i - 1] == self._starts[i]:
            self._ends[i - 1] = self._ends[i]
            del self._starts[i]
            del self._ends[i]
        self.used -= size


@dataclass
class Segment:
    info: SegmentInfo
    status: SegmentStatus = SegmentStatus.OK
    allocator: RangeAllocator = field(init=False)

    def __post_init__(self) -> None:
        self.allocator = RangeAllocator(self.info.base, self.info.capacity)

    @property
    def endpoint(self) -> str:
        return self.info.endpoint

    @property
    def readable(self) -> bool:
        return self.status in (SegmentStatus.OK, SegmentStatus.DRAINING, SegmentStatus.DRAINED)


class SegmentRegistry:
    """Segments by endpoint, with allocation across the allocatable ones."""

    def __init__(self) -> None:
        self._segments: dict[str, Segment] = {}
        self._next = 0

    def __contains__(self, endpoint: str) -> bool:
        return endpoint in self._segments

    def __len__(self) -> int:
        return len(self._segments)

    def get(self, endpoint: str) -> Segment | None:
        return self._segments.get(endpoint)

    def all(self) -> list[Segment]:
        return list(self._segments.values())

    def of_client(self, client_id: str) -> list[Segment]:
        return [s for s in self._segments.values() if s.info.client_id == client_id]

    def mount(self, info: SegmentInfo) -> tuple[Segment, bool]:
        """Mount; remounting an identical segment is idempotent (returns ``created=False``)."""
        if not info.endpoint or not info.name or info.capacity <= 0:
            raise MasterError(
                ErrorCode.INVALID_PARAMS,
                f"segment {info.endpoint!r}: name, endpoint and a non-zero capacity are required",
            )
        existing = self._segments.get(info.endpoint)
        if existing is not None:
            same = (
                existing.info.name == info.name
                and existing.info.capacity == info.capacity
                and existing.info.base == info.base
            )
            if not same:
                raise MasterError(
                    ErrorCode.INVALID_PARAMS,
                    f"segment {info.endpoint!r}: remount disagrees on name, base or capacity",
                )
            existing.info.client_id = info.client_id or existing.info.client_id
            return existing, False
        for seg in self._segments.values():
            if seg.info.name == info.name:
                raise MasterError(
                    ErrorCode.INVALID_PARAMS,
                    f"segment name {info.name!r} already used by endpoint {seg.endpoint!r}",
                )
        seg = Segment(info)
        self._segments[info.endpoint] = seg
        return seg, True

    def set_status(self, endpoint: str, status: SegmentStatus) -> Segment:
        seg = self.require(endpoint)
        if status is not seg.status and status not in _ALLOWED[seg.status]:
            raise MasterError(
                ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS,
                f"segment {endpoint!r}: cannot go from {seg.status.value} to {status.value}",
            )
        seg.status = status
        return seg

    def remove(self, endpoint: str) -> Segment:
        seg = self.require(endpoint)
        del self._segments[endpoint]
        return seg

    def require(self, endpoint: str) -> Segment:
        seg = self._segments.get(endpoint)
        if seg is None:
            raise MasterError(ErrorCode.SEGMENT_NOT_FOUND, f"segment {endpoint!r} is not mounted")
        return seg

    def allocate(self, size: int, count: int, exclude: set[str] = frozenset()) -> list[tuple[str, int]]:
        """``count`` ranges of ``size`` on distinct allocatable segments, round-robin."""
        candidates = [
            s for s in self._segments.values()
            if s.status is SegmentStatus.OK and s.endpoint not in exclude
        ]
        if not candidates:
            return []
        start = self._next % len(candidates)
        self._next += 1
        ordered = candidates[start:] + candidates[:start]
        got: list[tuple[str, int]] = []
        for seg in ordered:
            address = seg.allocator.allocate(size)
            if address is not None:
                got.append((seg.endpoint, address))
                if len(got) == count:
                    break
        return got

    def free(self, endpoint: str, address: int, size: int) -> None:
        seg = self._segments.get(endpoint)
        if seg is not None:
            seg.allocator.free(address, size)
