"""Anonymous memory for the engine's buffers, optionally at a fixed virtual address.

A restarted process can map its buffer at the address its predecessor used (MR-11: the new
descriptor then equals the old one except for ``instance_id``). ``MAP_FIXED_NOREPLACE`` never
clobbers an existing mapping: if the range is taken the start fails with a clear error.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from dataclasses import dataclass

PROT_READ_WRITE = mmap.PROT_READ | mmap.PROT_WRITE
MAP_FIXED_NOREPLACE = 0x100000
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


class MappingError(OSError):
    """The buffer could not be mapped (where, and why)."""


@dataclass
class Region:
    addr: int
    length: int
    view: memoryview
    """Writable bytes of the region (format ``B``)."""


def round_up(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


QUIET_LOW, QUIET_HIGH = 0x1000_0000_0000, 0x4000_0000_0000
"""A band of the x86-64 address space that neither the heap (near the executable) nor shared
libraries (just below the stack) reach. Buffers placed here by default leave their address
free in a successor process, so a restart that keeps addresses does not collide."""


def allocate_restartable(length: int, attempts: int = 8) -> Region:
    """Like ``allocate``, at a random page in the quiet band (any address if that fails)."""
    size = round_up(length)
    for _ in range(attempts):
        hint = QUIET_LOW + int.from_bytes(os.urandom(6), "little") % (
            (QUIET_HIGH - QUIET_LOW - size) // PAGE) * PAGE
        try:
            return allocate(length, fixed_address=hint)
        except MappingError:
            continue
    return allocate(length)


def allocate(length: int, fixed_address: int | None = None) -> Region:
    """Map ``length`` bytes (rounded up to pages) of zeroed private memory."""
    if length <= 0:
        raise ValueError(f"buffer size must be > 0, got {length}")
    size = round_up(length)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if fixed_address is not None:
        if fixed_address <= 0 or fixed_address % PAGE:
            raise ValueError(f"fixed address {fixed_address:#x} is not page aligned")
        flags |= MAP_FIXED_NOREPLACE
    got = _libc.mmap(fixed_address, size, PROT_READ_WRITE, flags, -1, 0)
    if got is None or got == _MAP_FAILED:
        err = ctypes.get_errno()
        where = f" at {fixed_address:#x}" if fixed_address is not None else ""
        hint = " (the range is already mapped in this process)" if err == errno.EEXIST else ""
        raise MappingError(err, f"cannot map {size} bytes{where}: {os.strerror(err)}{hint}")
    if fixed_address is not None and got != fixed_address:
        _libc.munmap(got, size)
        raise MappingError(errno.EEXIST, f"kernel placed the buffer at {got:#x}, not at "
                                         f"{fixed_address:#x} (no MAP_FIXED_NOREPLACE?)")
    view = memoryview((ctypes.c_char * size).from_address(got)).cast("B")
    return Region(addr=got, length=size, view=view)
