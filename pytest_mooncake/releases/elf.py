"""What an ELF file links and imports, read with binutils (``readelf``, ``nm``).

binutils comes with the C compiler the stand-ins need, so it is on every machine that can
build them; where it is missing the error says which package to install.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

HINT = "install binutils (apt-get install -y binutils)"


class ElfToolError(RuntimeError):
    """readelf or nm is missing or failed; the message says which and on what file."""


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(root: Path) -> Iterator[Path]:
    """ELF files (shared objects and executables) below ``root``, sorted."""
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and is_elf(path):
            yield path


def _run(tool: str, *args: str) -> str:
    exe = shutil.which(tool)
    if not exe:
        raise ElfToolError(f"{tool} not found on PATH: {HINT}")
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise ElfToolError(f"{tool} {' '.join(args)} took over 60 s") from None
    if out.returncode != 0:
        raise ElfToolError(f"{tool} {' '.join(args)} failed (exit {out.returncode}): "
                           f"{out.stderr.strip()[:500]}")
    return out.stdout


def needed(path: Path) -> list[str]:
    """DT_NEEDED entries: the sonames the dynamic loader must find for ``path``."""
    text = _run("readelf", "-d", "--wide", str(path))
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)


def _symbols(path: Path, which: str) -> set[str]:
    names = set()
    for line in _run("nm", "-D", which, str(path)).splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@", 1)[0])
    return names


def undefined_symbols(path: Path) -> set[str]:
    """Dynamic symbols ``path`` imports (``nm -D --undefined-only``), without version suffixes."""
    return _symbols(path, "--undefined-only")


def defined_symbols(path: Path) -> set[str]:
    """Dynamic symbols ``path`` exports (``nm -D --defined-only``)."""
    return _symbols(path, "--defined-only")


def versioned_symbols(path: Path, *, defined: bool) -> set[str]:
    """Dynamic symbols as ``name@VERSION`` (bare ``name`` where unversioned): the ones ``path``
    imports, or with ``defined`` the ones it exports (a default version's ``@@`` as ``@``),
    so an import and the export that satisfies it compare equal."""
    which = "--defined-only" if defined else "--undefined-only"
    out = set()
    for line in _run("nm", "-D", "--with-symbol-versions", which, str(path)).splitlines():
        parts = line.split()
        if parts and parts[-2:-1] != ["A"]:  # "A" lines are the version nodes themselves
            out.add(parts[-1].replace("@@", "@"))
    return out


def printable_strings(path: Path, pattern: re.Pattern[bytes]) -> set[str]:
    """Every match of ``pattern`` in the file's bytes (e.g. environment variable names an
    ``.so`` reads: they are stored as C strings)."""
    return {m.decode("ascii", "replace") for m in pattern.findall(path.read_bytes())}
