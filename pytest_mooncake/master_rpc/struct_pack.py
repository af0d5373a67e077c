"""struct_pack as mooncake_master's yalantinglibs speaks it: type literals, the 32-bit type hash,
the metainfo byte and the value encoding, for the types the master RPC carries.

Rules learned from yalantinglibs (include/ylt/struct_pack/type_id.hpp, type_calculate.hpp,
calculate_size.hpp, packer.hpp, unpacker.hpp, alignment.hpp at the commits Mooncake pins):

- a message is ``hash(4, LE) [metainfo(1) [type literal NUL]] payload``. ``hash`` is the first
  four MD5 bytes of the type literal read big-endian, low bit cleared; the low bit set means a
  metainfo byte follows. Metainfo bits 3-4 give the width of every container size prefix (0:
  1 byte, 1: 2, 2: 4, 3: 8), chosen from the largest container in the message; bit 2 says the
  type literal follows (builds without NDEBUG send it); bits 0-1 a compatible-field length
  (no master RPC type has ``struct_pack::compatible`` members, so it is refused here).
- plain integers, enums (their underlying integer) and floats are fixed-width little-endian
  (no varint unless a type opts in; none of the master's do).
- a struct of only trivially copyable members without YLT_REFL (``std::pair<u64,u64>``, the
  UUID) is its C memory image; its literal carries its pack alignment and alignment.
- several call arguments are one ``std::tuple``: literal ``struct … end``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

STRING, ARRAY, MAP, SET, CONTAINER, OPTIONAL, VARIANT, EXPECTED = range(128, 136)
MONOSTATE, STRUCT, END, END_WITH_ID = 250, 253, 255, 252


class StructPackError(ValueError):
    """Bytes that are not a value of the expected type (what was read, where)."""


def size_literal(n: int) -> bytes:
    """struct_pack's base-127 size literal (last digit + 129, others + 1)."""
    digits = []
    while True:
        digits.append(n % 127)
        n //= 127
        if n == 0:
            break
    return bytes([d + 1 for d in digits[:-1]] + [digits[-1] + 129])


def hash32(data: bytes) -> int:
    """MD5Hash32Constexpr: the first four digest bytes, big-endian."""
    return int.from_bytes(hashlib.md5(data).digest()[:4], "big")


# ------------------------------------------------------------------------------------ types


class SpType:
    """One C++ type as struct_pack sees it (subclasses give it a ``name``)."""

    trivial = False
    """Trivially serializable: written as its memory image."""
    size = 0
    align = 1

    def literal(self) -> bytes:
        raise NotImplementedError

    def has_container(self) -> bool:
        return False

    def max_len(self, value: Any) -> int:
        """The largest container size inside ``value`` (picks the size-prefix width)."""
        return 0

    def encode(self, value: Any, out: bytearray, width: int) -> None:
        raise NotImplementedError

    def decode(self, buf: memoryview, pos: int, width: int) -> tuple[Any, int]:
        raise NotImplementedError

    def compatible_versions(self) -> list[int]:
        """Versions of the ``struct_pack::compatible`` members inside (struct fields and the
        elements of vectors of them, as the master's types nest them)."""
        return []

    def encode_late(self, value: Any, out: bytearray, width: int, version: int) -> None:
        """Write the values of the compatible members of ``version`` inside ``value``."""

    def decode_late(self, value: Any, buf: memoryview, pos: int, width: int,
                    version: int) -> int:
        """Read them into ``value`` (a decoded struct dict, or a list of them)."""
        return pos

    def __repr__(self) -> str:
        return self.name


@dataclass(repr=False)
class Int(SpType):
    name: str
    code: int
    fmt: str

    def __post_init__(self):
        self.size = self.align = struct.calcsize("<" + self.fmt)
        self.trivial = True

    def literal(self) -> bytes:
        return bytes([self.code])

    def encode(self, value, out, width):
        try:
            out += struct.pack("<" + self.fmt, value)
        except struct.error as exc:
            raise StructPackError(f"{self.name}: cannot encode {value!r} ({exc})") from None

    def decode(self, buf, pos, width):
        end = pos + self.size
        if end > len(buf):
            raise StructPackError(f"{self.name} at byte {pos}: the buffer ends at {len(buf)}")
        return struct.unpack_from("<" + self.fmt, buf, pos)[0], end


I32, U32, I64, U64 = Int("int32", 1, "i"), Int("uint32", 2, "I"), Int("int64", 3, "q"), Int("uint64", 4, "Q")
I8, U8, I16, U16 = Int("int8", 5, "b"), Int("uint8", 6, "B"), Int("int16", 7, "h"), Int("uint16", 8, "H")
BOOL, CHAR = Int("bool", 11, "?"), Int("char", 12, "B")
F32, F64 = Int("float", 18, "f"), Int("double", 19, "d")
FUNDAMENTALS = {t.code: t for t in (I32, U32, I64, U64, I8, U8, I16, U16, BOOL, CHAR, F32, F64)}


@dataclass(repr=False)
class Enum(SpType):
    """A C++ enum: its underlying integer on the wire; values read back as names."""

    name: str
    base: Int
    values: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self.size = self.align = self.base.size
        self.trivial = True

    def literal(self):
        return self.base.literal()

    def encode(self, value, out, width):
        self.base.encode(self.values[value] if isinstance(value, str) else int(value), out, width)

    def decode(self, buf, pos, width):
        raw, pos = self.base.decode(buf, pos, width)
        names = {v: k for k, v in self.values.items()}
        return names.get(raw, raw), pos


def write_len(n: int, out: bytearray, width: int) -> None:
    out += n.to_bytes(width, "little")


def read_len(buf: memoryview, pos: int, width: int, what: str) -> tuple[int, int]:
    if pos + width > len(buf):
        raise StructPackError(f"{what}: size prefix at byte {pos} past the end ({len(buf)})")
    return int.from_bytes(buf[pos:pos + width], "little"), pos + width


class String(SpType):
    name = "string"

    def literal(self):
        return bytes([STRING]) + CHAR.literal()

    def has_container(self):
        return True

    def max_len(self, value):
        return len(value.encode() if isinstance(value, str) else value)

    def encode(self, value, out, width):
        data = value.encode() if isinstance(value, str) else bytes(value)
        write_len(len(data), out, width)
        out += data

    def decode(self, buf, pos, width):
        n, pos = read_len(buf, pos, width, "string")
        if pos + n > len(buf):
            raise StructPackError(f"string of {n} bytes at {pos}: the buffer ends at {len(buf)}")
        data = bytes(buf[pos:pos + n])
        try:
            return data.decode(), pos + n
        except UnicodeDecodeError:
            return data, pos + n


STR = String()


@dataclass(repr=False)
class Vector(SpType):
    item: SpType

    @property
    def name(self):
        return f"vector<{self.item!r}>"

    def literal(self):
        return bytes([CONTAINER]) + self.item.literal()

    def has_container(self):
        return True

    def max_len(self, value):
        return max([len(value)] + [self.item.max_len(v) for v in value])

    def encode(self, value, out, width):
        write_len(len(value), out, width)
        for v in value:
            self.item.encode(v, out, width)

    def compatible_versions(self):
        return self.item.compatible_versions()

    def encode_late(self, value, out, width, version):
        for v in value:
            self.item.encode_late(v, out, width, version)

    def decode_late(self, value, buf, pos, width, version):
        for v in value:
            pos = self.item.decode_late(v, buf, pos, width, version)
        return pos

    def decode(self, buf, pos, width):
        n, pos = read_len(buf, pos, width, self.name)
        items = []
        for _ in range(n):
            v, pos = self.item.decode(buf, pos, width)
            items.append(v)
        return items, pos


@dataclass(repr=False)
class Map(SpType):
    key: SpType
    value: SpType

    @property
    def name(self):
        return f"map<{self.key!r},{self.value!r}>"

    def literal(self):
        return bytes([MAP]) + self.key.literal() + self.value.literal()

    def has_container(self):
        return True

    def max_len(self, value):
        return max([len(value)] + [max(self.key.max_len(k), self.value.max_len(v))
                                   for k, v in value.items()])

    def encode(self, value, out, width):
        write_len(len(value), out, width)
        for k, v in value.items():
            self.key.encode(k, out, width)
            self.value.encode(v, out, width)

    def decode(self, buf, pos, width):
        n, pos = read_len(buf, pos, width, self.name)
        result = {}
        for _ in range(n):
            k, pos = self.key.decode(buf, pos, width)
            v, pos = self.value.decode(buf, pos, width)
            result[k if not isinstance(k, list) else tuple(k)] = v
        return result, pos


@dataclass(repr=False)
class Optional(SpType):
    item: SpType

    @property
    def name(self):
        return f"optional<{self.item!r}>"

    def literal(self):
        return bytes([OPTIONAL]) + self.item.literal()

    def has_container(self):
        return self.item.has_container()

    def max_len(self, value):
        return 0 if value is None else self.item.max_len(value)

    def encode(self, value, out, width):
        out.append(value is not None)
        if value is not None:
            self.item.encode(value, out, width)

    def decode(self, buf, pos, width):
        present, pos = BOOL.decode(buf, pos, width)
        return self.item.decode(buf, pos, width) if present else (None, pos)


@dataclass(repr=False)
class Variant(SpType):
    """``std::variant``: a one-byte index, then that alternative. Values are (index, value)."""

    alternatives: tuple[SpType, ...]

    @property
    def name(self):
        return f"variant<{','.join(map(repr, self.alternatives))}>"

    def literal(self):
        return bytes([VARIANT]) + b"".join(a.literal() for a in self.alternatives) + bytes([END])

    def has_container(self):
        return any(a.has_container() for a in self.alternatives)

    def max_len(self, value):
        index, inner = value
        return self.alternatives[index].max_len(inner)

    def encode(self, value, out, width):
        index, inner = value
        out.append(index)
        self.alternatives[index].encode(inner, out, width)

    def decode(self, buf, pos, width):
        index, pos = U8.decode(buf, pos, width)
        if index >= len(self.alternatives):
            raise StructPackError(f"{self.name}: index {index} at byte {pos - 1}")
        inner, pos = self.alternatives[index].decode(buf, pos, width)
        return (index, inner), pos


@dataclass(frozen=True)
class Unexpected:
    """The error side of a ``tl::expected`` (Mooncake: an ErrorCode)."""

    error: Any


@dataclass(repr=False)
class Expected(SpType):
    """``tl::expected<T, E>``: a bool, then T or E. Values are T, or ``Unexpected(E)``."""

    value: SpType
    error: SpType

    @property
    def name(self):
        return f"expected<{self.value!r},{self.error!r}>"

    def literal(self):
        return bytes([EXPECTED]) + self.value.literal() + self.error.literal()

    def has_container(self):
        return self.value.has_container() or self.error.has_container()

    def max_len(self, value):
        if isinstance(value, Unexpected):
            return self.error.max_len(value.error)
        return self.value.max_len(value)

    def encode(self, value, out, width):
        failed = isinstance(value, Unexpected)
        out.append(not failed)
        if failed:
            self.error.encode(value.error, out, width)
        else:
            self.value.encode(value, out, width)

    def decode(self, buf, pos, width):
        ok, pos = BOOL.decode(buf, pos, width)
        if ok:
            return self.value.decode(buf, pos, width)
        err, pos = self.error.decode(buf, pos, width)
        return Unexpected(err), pos


class Monostate(SpType):
    """``void`` / ``std::monostate``: nothing on the wire."""

    name = "void"
    trivial = True

    def literal(self):
        return bytes([MONOSTATE])

    def encode(self, value, out, width):
        pass

    def decode(self, buf, pos, width):
        return None, pos


VOID = Monostate()


@dataclass(repr=False)
class Compatible(SpType):
    """``struct_pack::compatible<T, version>``: left out of the literal and the hash; its value
    (a bool, then T) follows the whole payload, grouped by version. ``item`` None: a member
    whose type the source does not show (0.3.14's), which this client only sends absent."""

    item: SpType | None
    version: int = 1

    @property
    def name(self):
        return f"compatible<{self.item!r},{self.version}>"

    def literal(self):
        return b""

    def has_container(self):
        return self.item is not None and self.item.has_container()

    def max_len(self, value):
        return 0 if value is None else self.item.max_len(value)

    def encode(self, value, out, width):
        pass

    def decode(self, buf, pos, width):
        return None, pos

    def write_value(self, value, out, width):
        out.append(value is not None)
        if value is not None:
            if self.item is None:
                raise StructPackError(f"{self.name}: a value for a member of unknown type")
            self.item.encode(value, out, width)

    def read_value(self, buf, pos, width):
        present, pos = BOOL.decode(buf, pos, width)
        if not present:
            return None, pos
        if self.item is None:
            raise StructPackError(f"{self.name} at byte {pos - 1} is present, of a type the "
                                  f"layout does not know")
        return self.item.decode(buf, pos, width)


@dataclass(repr=False)
class Struct(SpType):
    """A reflected struct (aggregate or YLT_REFL), or the ``std::tuple`` of call arguments.
    ``refl``: declared with YLT_REFL, which struct_pack never treats as trivially
    serializable; an aggregate of trivial members (``std::pair<u64,u64>``) is a memory image.
    Values are dicts by field name (tuples by position are accepted)."""

    name: str
    fields: tuple[tuple[str, SpType], ...]
    refl: bool = True

    def __post_init__(self):
        self.trivial = not self.refl and all(t.trivial for _, t in self.fields)
        self.align = max([t.align for _, t in self.fields] or [1])
        offset, self.offsets = 0, []
        for _, t in self.fields:
            offset += -offset % t.align
            self.offsets.append(offset)
            offset += t.size
        self.size = offset + (-offset % self.align)

    def literal(self):
        body = b"".join(t.literal() for _, t in self.fields)
        if self.trivial:
            body += size_literal(self.align) + size_literal(self.align)
        return bytes([STRUCT]) + body + bytes([END])

    def has_container(self):
        return any(t.has_container() for _, t in self.fields)

    def compatible_versions(self) -> list[int]:
        found = set()
        for _, t in self.fields:
            if isinstance(t, Compatible):
                found.add(t.version)
            else:
                found.update(t.compatible_versions())
        return sorted(found)

    def encode_late(self, value, out, width, version):
        for (_, t), v in zip(self.fields, self.values(value), strict=True):
            if isinstance(t, Compatible):
                if t.version == version:
                    t.write_value(v, out, width)
            else:
                t.encode_late(v, out, width, version)

    def decode_late(self, value, buf, pos, width, version):
        for n, t in self.fields:
            if isinstance(t, Compatible):
                if t.version == version:
                    value[n], pos = t.read_value(buf, pos, width)
            else:
                pos = t.decode_late(value[n], buf, pos, width, version)
        return pos

    def values(self, value) -> list:
        if isinstance(value, dict):
            value = {**{n: None for n, t in self.fields if isinstance(t, Compatible)}, **value}
            missing = [n for n, _ in self.fields if n not in value]
            if missing:
                raise StructPackError(f"{self.name}: no value for {', '.join(missing)}")
            return [value[n] for n, _ in self.fields]
        if len(value) != len(self.fields):
            raise StructPackError(f"{self.name} has {len(self.fields)} fields, got {len(value)}")
        return list(value)

    def max_len(self, value):
        return max([0] + [t.max_len(v) for (_, t), v in zip(self.fields, self.values(value), strict=True)])

    def encode(self, value, out, width):
        start = len(out)
        for (_, t), off, v in zip(self.fields, self.offsets, self.values(value), strict=True):
            if self.trivial:
                out += bytes(start + off - len(out))
            t.encode(v, out, width)
        if self.trivial:
            out += bytes(start + self.size - len(out))

    def decode(self, buf, pos, width):
        start, result = pos, {}
        for (n, t), off in zip(self.fields, self.offsets, strict=True):
            if self.trivial:
                pos = start + off
            result[n], pos = t.decode(buf, pos, width)
        return result, (start + self.size if self.trivial else pos)


def UUID() -> Struct:  # noqa: N802 - named as Mooncake names the type
    """``std::pair<uint64_t, uint64_t>``: Mooncake's client, segment and object ids."""
    return Struct("UUID", (("first", U64), ("second", U64)), refl=False)


def args_type(args: tuple[SpType, ...]) -> SpType | None:
    """The type coro_rpc serializes a call's arguments as: one argument as itself, several as
    a ``std::tuple`` (``struct`` literal), none: no body at all."""
    if not args:
        return None
    if len(args) == 1:
        return args[0]
    return Struct("tuple", tuple((f"arg{i}", t) for i, t in enumerate(args)), refl=True)


# ----------------------------------------------------------------------------- messages


def types_code(t: SpType) -> int:
    return hash32(t.literal()) & 0xFFFFFFFE


@dataclass(frozen=True)
class Header:
    """What precedes a message's payload."""

    hash: int
    width: int
    literal: bytes | None
    payload_at: int
    total: int | None = None
    """The whole message's length, sent when the type has ``struct_pack::compatible``
    members: their values follow the payload (the literal leaves them out)."""


WIDTH_BITS = {1: 0, 2: 1, 4: 2, 8: 3}


def late_versions(t: SpType) -> list[int]:
    """The versions of ``t``'s compatible members."""
    return t.compatible_versions()


def serialize(t: SpType, value: Any, type_literal: bool = False) -> bytes:
    """``t``'s message for ``value``. ``type_literal``: also send the literal (as a build
    without NDEBUG does)."""
    longest = t.max_len(value) if t.has_container() else 0
    width = 1 if longest < 1 << 8 else 2 if longest < 1 << 16 else 4 if longest < 1 << 32 else 8
    payload = bytearray()
    t.encode(value, payload, width)
    versions = late_versions(t)
    for version in versions:
        t.encode_late(value, payload, width, version)
    code = types_code(t)
    literal = t.literal() + b"\0" if type_literal else b""
    if width == 1 and not type_literal and not versions:
        return code.to_bytes(4, "little") + bytes(payload)
    meta = (WIDTH_BITS[width] << 3) | (0b100 if type_literal else 0)
    head = (code | 1).to_bytes(4, "little")
    if not versions:
        return head + bytes([meta]) + literal + bytes(payload)
    size = 4 + 1 + len(literal) + len(payload)
    n = 2 if size + 2 < 1 << 16 else 4 if size + 4 < 1 << 32 else 8
    meta |= {2: 1, 4: 2, 8: 3}[n]
    return (head + bytes([meta]) + (size + n).to_bytes(n, "little") + literal
            + bytes(payload))


def read_header(data: bytes) -> Header:
    """The hash, size width and (when sent) type literal at the start of a message."""
    if len(data) < 4:
        raise StructPackError(f"a struct_pack message needs 4 hash bytes, got {len(data)}")
    code = int.from_bytes(data[:4], "little")
    if not code & 1:
        return Header(code, 1, None, 4)
    if len(data) < 5:
        raise StructPackError("hash says a metainfo byte follows; the message ends")
    meta = data[4]
    width = 1 << ((meta >> 3) & 0b11)
    literal, pos, total = None, 5, None
    if meta & 0b11:
        n = 1 << (meta & 0b11)
        if len(data) < pos + n:
            raise StructPackError(f"metainfo {meta:#04x}: the message ends in its length")
        total, pos = int.from_bytes(data[pos:pos + n], "little"), pos + n
    if meta & 0b100:
        end = data.find(b"\0", pos)
        if end < 0:
            raise StructPackError("metainfo announces a type literal with no NUL ending it")
        literal, pos = data[pos:end], end + 1
    return Header(code & 0xFFFFFFFE, width, literal, pos, total)


def deserialize(t: SpType, data: bytes) -> Any:
    """The value of ``t`` in ``data``; ``StructPackError`` naming what does not match.
    Compatible members ``t`` declares are read after the payload (None: absent or not sent);
    ones it does not declare are left there (``compatible_tail``)."""
    head = read_header(data)
    want = types_code(t)
    if head.hash != want:
        seen = f" (its literal {head.literal.hex()})" if head.literal is not None else ""
        raise StructPackError(f"type hash {head.hash:#010x}{seen} is not {t!r}'s "
                              f"{want:#010x} (literal {t.literal().hex()})")
    buf = memoryview(data)
    value, end = t.decode(buf, head.payload_at, head.width)
    if head.total is not None and head.total <= len(data):
        for version in late_versions(t):
            if end < head.total:
                end = t.decode_late(value, buf, end, head.width, version)
        if end > head.total:
            raise StructPackError(f"{t!r} ended at byte {end}, past the announced {head.total}")
    elif end != len(data):
        raise StructPackError(f"{t!r} ended at byte {end} of {len(data)}")
    return value


def compatible_tail(data: bytes, t: SpType) -> bytes:
    """The bytes of ``t``'s compatible members in ``data`` (empty when it sends none)."""
    head = read_header(data)
    _, end = t.decode(memoryview(data), head.payload_at, head.width)
    return data[end:head.total] if head.total is not None else b""
