"""XXH32 (seed 0 by default): the checksum Mooncake puts on OpLog batch records.

A plain-Python implementation of the published algorithm; the ``xxhash`` package is used
instead when it is installed, because it is much faster.
"""

from __future__ import annotations

import struct

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32_python(data: bytes, seed: int = 0) -> int:
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        stripes = n // 16
        lanes = struct.unpack_from(f"<{stripes * 4}I", data, 0)
        p1, p2, m = _P1, _P2, _M
        it = iter(lanes)
        for a, b, c, d in zip(it, it, it, it, strict=True):
            v1 = (v1 + a * p2) & m
            v1 = ((((v1 << 13) & m) | (v1 >> 19)) * p1) & m
            v2 = (v2 + b * p2) & m
            v2 = ((((v2 << 13) & m) | (v2 >> 19)) * p1) & m
            v3 = (v3 + c * p2) & m
            v3 = ((((v3 << 13) & m) | (v3 >> 19)) * p1) & m
            v4 = (v4 + d * p2) & m
            v4 = ((((v4 << 13) & m) | (v4 >> 19)) * p1) & m
        i = stripes * 16
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        acc = (seed + _P5) & _M
    acc = (acc + n) & _M
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        acc = (acc + lane * _P3) & _M
        acc = (_rotl(acc, 17) * _P4) & _M
        i += 4
    while i < n:
        acc = (acc + data[i] * _P5) & _M
        acc = (_rotl(acc, 11) * _P1) & _M
        i += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M
    acc ^= acc >> 13
    acc = (acc * _P3) & _M
    acc ^= acc >> 16
    return acc


try:  # pragma: no cover - depends on the environment
    import xxhash as _xxhash

    def xxh32(data: bytes, seed: int = 0) -> int:
        return _xxhash.xxh32_intdigest(data, seed)

except ImportError:
    xxh32 = xxh32_python
