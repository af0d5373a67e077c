"""Parse a gflags program's ``--help`` into its flags (name, type, default, where defined).

gflags prints one section per source file ("Flags from FILE:") and one entry per flag,
wrapped over several lines::

    -client_ttl (Deprecated alias for --client_active_ttl_sec) type: int64
      default: 10
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SECTION = re.compile(r"^\s*Flags from (?P<file>.+?):\s*$")
_START = re.compile(r"^\s{2,}-(?P<name>[A-Za-z0-9_]+) \(")
_ENTRY = re.compile(
    r"^-(?P<name>[A-Za-z0-9_]+) \((?P<description>.*)\) type: (?P<type>\w+)\s+"
    r"default: (?P<default>\"(?:[^\"\\]|\\.)*\"|\S+)(?:\s+currently: (?P<current>.*))?$", re.S)


@dataclass(frozen=True)
class Flag:
    name: str
    type: str
    default: str
    """As printed, quotes removed from strings (``"random"`` -> ``random``)."""
    description: str
    source: str
    """The "Flags from" file (e.g. ``.../mooncake-store/src/master.cpp``)."""

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "default": self.default, "description": self.description,
                "source": self.source}


def parse_help(text: str) -> dict[str, Flag]:
    """``{flag name: Flag}`` of every flag ``--help`` lists; raises ValueError when the text
    has no gflags section at all (not a gflags program, or it failed before printing)."""
    flags: dict[str, Flag] = {}
    source = ""
    entry: list[str] = []
    seen_section = False

    def flush() -> None:
        if not entry:
            return
        joined = " ".join(part.strip() for part in entry)
        match = _ENTRY.match(joined)
        if match:
            default = match["default"]
            if default.startswith('"') and default.endswith('"') and len(default) >= 2:
                default = default[1:-1]
            flags[match["name"]] = Flag(match["name"], match["type"], default,
                                        " ".join(match["description"].split()), source)
        entry.clear()

    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            flush()
            source, seen_section = section["file"].strip(), True
            continue
        if _START.match(line):
            flush()
            entry.append(line)
        elif entry and line.strip():
            entry.append(line)
        else:
            flush()
    flush()
    if not seen_section:
        raise ValueError("no 'Flags from ...' section in the --help output: " + text.strip()[:300])
    return flags
