"""Read a struct_pack type literal back into types: a build that sends literals (the releases
do: they are built without NDEBUG) describes every answer it gives, so an answer whose layout
we did not declare can still be decoded, and a declared layout can be compared with the one
the release really uses."""

from __future__ import annotations

from pytest_mooncake.master_rpc import struct_pack as sp

ALIGNMENTS = {sp.size_literal(n)[0]: n for n in (1, 2, 4, 8, 16)}


class LiteralError(ValueError):
    """A literal this reader cannot parse (where, and the byte it stopped at)."""


def parse(literal: bytes) -> sp.SpType:
    """The one type ``literal`` describes."""
    t, end = _parse(literal, 0)
    if end != len(literal):
        raise LiteralError(f"literal {literal.hex()}: {len(literal) - end} bytes left after "
                           f"{t!r}")
    return t


def _parse(lit: bytes, pos: int) -> tuple[sp.SpType, int]:
    if pos >= len(lit):
        raise LiteralError(f"literal {lit.hex()} ends inside a type")
    code = lit[pos]
    pos += 1
    if code in sp.FUNDAMENTALS:
        return sp.FUNDAMENTALS[code], pos
    if code == sp.STRING:
        if lit[pos:pos + 1] != sp.CHAR.literal():
            raise LiteralError(f"string of element {lit[pos:pos + 1].hex()} at byte {pos}")
        return sp.STR, pos + 1
    if code == sp.CONTAINER:
        item, pos = _parse(lit, pos)
        return sp.Vector(item), pos
    if code == sp.OPTIONAL:
        item, pos = _parse(lit, pos)
        return sp.Optional(item), pos
    if code in (sp.MAP, sp.EXPECTED):
        first, pos = _parse(lit, pos)
        second, pos = _parse(lit, pos)
        return (sp.Map(first, second) if code == sp.MAP else sp.Expected(first, second)), pos
    if code == sp.MONOSTATE:
        return sp.VOID, pos
    if code == sp.VARIANT:
        alternatives = []
        while lit[pos:pos + 1] != bytes([sp.END]):
            t, pos = _parse(lit, pos)
            alternatives.append(t)
        return sp.Variant(tuple(alternatives)), pos + 1
    if code == sp.STRUCT:
        return _struct(lit, pos)
    raise LiteralError(f"type code {code} at byte {pos - 1} of {lit.hex()} is not one the "
                       f"master RPC uses")


def _struct(lit: bytes, pos: int) -> tuple[sp.SpType, int]:
    fields: list[tuple[str, sp.SpType]] = []
    while True:
        if pos >= len(lit):
            raise LiteralError(f"struct in {lit.hex()} has no end flag")
        if lit[pos] == sp.END:
            return sp.Struct("struct", tuple(fields), refl=True), pos + 1
        # a trivially serializable struct ends with its pack alignment and alignment
        if (lit[pos] in ALIGNMENTS and lit[pos + 1:pos + 2] and lit[pos + 1] in ALIGNMENTS
                and lit[pos + 2:pos + 3] == bytes([sp.END])
                and all(t.trivial for _, t in fields)):
            s = sp.Struct("struct", tuple(fields), refl=False)
            if s.align != ALIGNMENTS[lit[pos + 1]]:
                raise LiteralError(f"struct of {fields} announces alignment "
                                   f"{ALIGNMENTS[lit[pos + 1]]}, its members give {s.align}")
            return s, pos + 3
        t, pos = _parse(lit, pos)
        fields.append((f"f{len(fields)}", t))


def describe(t: sp.SpType) -> str:
    """A one-line C++-like spelling of a parsed type (for probe messages)."""
    if isinstance(t, sp.Struct):
        return "{" + ", ".join(describe(f) for _, f in t.fields) + "}"
    if isinstance(t, sp.Vector):
        return f"vector<{describe(t.item)}>"
    if isinstance(t, sp.Optional):
        return f"optional<{describe(t.item)}>"
    if isinstance(t, sp.Map):
        return f"map<{describe(t.key)},{describe(t.value)}>"
    if isinstance(t, sp.Expected):
        return f"expected<{describe(t.value)},{describe(t.error)}>"
    if isinstance(t, sp.Variant):
        return f"variant<{','.join(describe(a) for a in t.alternatives)}>"
    if isinstance(t, sp.Enum):
        return t.base.name
    return t.name
