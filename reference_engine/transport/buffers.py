"""The server's registered memory: which wire addresses a peer may touch, and where they live.

Readers never lock: the table is an immutable snapshot replaced whole on (un)registration.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from typing import NamedTuple


class Region(NamedTuple):
    addr: int
    length: int
    view: memoryview  # writable, format "B", len == length


class _Snapshot(NamedTuple):
    starts: tuple[int, ...]
    regions: tuple[Region, ...]


_EMPTY = _Snapshot((), ())


class RegisteredBuffers:
    """Non-overlapping ``[addr, addr + length)`` ranges, each backed by a writable memoryview."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = _EMPTY

    def register(self, addr: int, view) -> None:
        mv = memoryview(view)
        if mv.readonly:
            raise ValueError(f"buffer at 0x{addr:x} is read-only; peers must be able to write it")
        if not mv.c_contiguous:
            raise ValueError(f"buffer at 0x{addr:x} is not contiguous")
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        length = mv.nbytes
        if length <= 0:
            raise ValueError(f"buffer at 0x{addr:x} has length {length}; must be > 0")
        if addr <= 0 or addr + length > 1 << 64:
            raise ValueError(f"buffer address 0x{addr:x} (+{length}) is not a valid u64 range")
        with self._lock:
            snap = self._snap
            for r in snap.regions:
                if addr < r.addr + r.length and r.addr < addr + length:
                    raise ValueError(
                        f"buffer [0x{addr:x}, +{length}) overlaps registered "
                        f"[0x{r.addr:x}, +{r.length})"
                    )
            regions = sorted((*snap.regions, Region(addr, length, mv)))
            self._snap = _Snapshot(tuple(r.addr for r in regions), tuple(regions))

    def unregister(self, addr: int) -> None:
        with self._lock:
            snap = self._snap
            kept = tuple(r for r in snap.regions if r.addr != addr)
            if len(kept) == len(snap.regions):
                raise KeyError(f"no buffer registered at 0x{addr:x}")
            self._snap = _Snapshot(tuple(r.addr for r in kept), kept)

    def regions(self) -> tuple[Region, ...]:
        return self._snap.regions

    def resolve(self, addr: int, size: int) -> memoryview | None:
        """The view of ``[addr, addr + size)`` if one buffer holds all of it, else None."""
        if size <= 0:
            return None
        snap = self._snap
        i = bisect_right(snap.starts, addr) - 1
        if i < 0:
            return None
        r = snap.regions[i]
        off = addr - r.addr
        if off + size > r.length:
            return None
        return r.view[off : off + size]
