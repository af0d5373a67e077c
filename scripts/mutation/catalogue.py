"""The mutant catalogue: ``mutants/*.toml`` parsed into ``Mutant`` records, and patches applied
as anchored replacements that refuse to apply anywhere but where they were written."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KINDS = ("failure-path", "boundary", "lifetime", "locking", "config", "counters", "logic")


class CatalogueError(Exception):
    """The catalogue is malformed or a patch no longer applies (names mutant, file, anchor)."""


# ---------------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class Hunk:
    file: str
    find: str
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    requirements: tuple[str, ...]
    kind: str
    why: str
    breaks: str
    hunks: tuple[Hunk, ...]
    tests: tuple[str, ...] = ()
    suites: tuple[str, ...] = ("suites/",)
    deadline: float | None = None
    source: str = ""
    function: str = ""
    """``file::qualname`` of the one function a mechanical mutant edits (the reach map's key)."""

    @property
    def files(self) -> list[str]:
        return sorted({h.file for h in self.hunks})


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CatalogueError(f"{where}: expected a string or a list of strings, got {value!r}")
    return tuple(value)


def parse_mutant(raw: dict[str, Any], source: str) -> Mutant:
    where = f"{source}: mutant {raw.get('id', '?')!r}"
    for key in ("id", "requirements", "kind", "why", "breaks", "patch"):
        if key not in raw:
            raise CatalogueError(f"{where}: missing {key!r}")
    known = {"id", "requirements", "kind", "why", "breaks", "patch", "file", "tests", "suites",
             "deadline"}
    if set(raw) - known:
        raise CatalogueError(f"{where}: unknown keys {sorted(set(raw) - known)}")
    if raw["kind"] not in KINDS:
        raise CatalogueError(f"{where}: kind {raw['kind']!r} is not one of {', '.join(KINDS)}")
    hunks = []
    for i, h in enumerate(raw["patch"]):
        file = h.get("file", raw.get("file"))
        if not file or "find" not in h or "replace" not in h:
            raise CatalogueError(f"{where}: patch[{i}] needs file (here or on the mutant), find "
                                 f"and replace")
        if h["find"] == h["replace"]:
            raise CatalogueError(f"{where}: patch[{i}] replaces its anchor with itself")
        hunks.append(Hunk(file, h["find"], h["replace"]))
    if not hunks:
        raise CatalogueError(f"{where}: empty patch")
    deadline = raw.get("deadline")
    return Mutant(raw["id"], _strings(raw["requirements"], where + " requirements"), raw["kind"],
                  raw["why"].strip(), raw["breaks"].strip(), tuple(hunks),
                  _strings(raw.get("tests", []), where + " tests") if raw.get("tests") else (),
                  _strings(raw.get("suites", ["suites/"]), where + " suites"),
                  float(deadline) if deadline is not None else None, source)


def load_catalogue(directory: Path, known_requirements: set[str] | None = None) -> list[Mutant]:
    files = sorted(Path(directory).glob("*.toml"))
    if not files:
        raise CatalogueError(f"no mutant catalogue (*.toml) in {directory}")
    mutants: list[Mutant] = []
    seen: dict[str, str] = {}
    for path in files:
        try:
            doc = tomllib.loads(path.read_text("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
        for raw in doc.get("mutant", []):
            m = parse_mutant(raw, path.name)
            if m.id in seen:
                raise CatalogueError(f"mutant id {m.id!r} appears in {seen[m.id]} and {path.name}")
            seen[m.id] = path.name
            if known_requirements is not None:
                unknown = [r for r in m.requirements if r not in known_requirements]
                if unknown:
                    raise CatalogueError(f"{path.name}: mutant {m.id!r} names unknown "
                                         f"requirement(s) {unknown}")
            mutants.append(m)
    return mutants


def known_requirements(root: Path) -> set[str]:
    """Requirement IDs of the project's catalogue (the plugin's packaged copy)."""
    path = root / "pytest_mooncake" / "data" / "requirements.toml"
    return set(tomllib.loads(path.read_text("utf-8")).get("requirements", {}))


def mutated_sources(m: Mutant, read) -> dict[str, str]:
    """file -> mutated text, from ``read(file) -> original text``; CatalogueError when an anchor
    does not occur exactly once or the result does not compile."""
    texts: dict[str, str] = {}
    for i, h in enumerate(m.hunks):
        if h.file not in texts:
            try:
                texts[h.file] = read(h.file)
            except FileNotFoundError:
                raise CatalogueError(f"mutant {m.id!r}: patch[{i}]: no file {h.file}") from None
        count = texts[h.file].count(h.find)
        if count != 1:
            first = h.find.strip().splitlines()[0] if h.find.strip() else repr(h.find)
            raise CatalogueError(
                f"mutant {m.id!r} ({m.source}): patch[{i}]: the anchor occurs {count} times in "
                f"{h.file} (must be exactly once; update the anchor to the current code): "
                f"{first!r}")
        at = texts[h.file].index(h.find)
        if at and texts[h.file][at - 1] != "\n":
            raise CatalogueError(f"mutant {m.id!r} ({m.source}): patch[{i}]: the anchor must "
                                 f"start at the beginning of a line in {h.file} (whole lines, "
                                 f"indentation included)")
        texts[h.file] = texts[h.file].replace(h.find, h.replace)
    for file, text in texts.items():
        try:
            compile(text, file, "exec")
        except SyntaxError as exc:
            raise CatalogueError(f"mutant {m.id!r}: {file} does not compile after the patch: "
                                 f"{exc.msg} at line {exc.lineno}") from None
    return texts


def check(mutants: list[Mutant], root: Path) -> list[str]:
    """Problems of the catalogue against the tree at ``root`` (empty: every patch applies)."""
    problems = []
    for m in mutants:
        try:
            mutated_sources(m, lambda f: (root / f).read_text("utf-8"))
        except CatalogueError as exc:
            problems.append(str(exc))
        for path in (*m.tests, *m.suites):
            if not (root / path.split("::", 1)[0]).exists():
                problems.append(f"mutant {m.id!r}: test path {path} does not exist")
    return problems
