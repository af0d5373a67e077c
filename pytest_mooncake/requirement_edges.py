"""The edges catalogue (``data/edges.toml``): every requirement's quantifiers and edges, each
naming the tests that state the requirement's property there. Loaded and checked here; the
check against what pytest collects is ``tests/plugin/test_requirement_edges.py``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pytest_mooncake.report.catalogue import tomllib

CASES = {
    "range": ("inside", "edge", "straddling", "outside"),
    "set": ("first", "last", "none", "all"),
    "deadline": ("before", "at", "after"),
}
"""Kinds whose every case must be listed for each quantifier, in this order."""

FREE_KINDS = ("every", "only", "once", "count", "never", "per-process")
"""Kinds with no fixed cases: one entry per case the requirement names."""


class EdgesError(ValueError):
    """The catalogue is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Edge:
    requirement: str
    quantifier: str
    kind: str
    case: str
    states: str = ""
    tests: tuple[str, ...] = ()
    impossible: str = ""
    pending: str = ""

    def __str__(self) -> str:
        return f"{self.requirement} {self.kind} {self.case!r} of {self.quantifier!r}"


def default_path() -> Path:
    return Path(str(resources.files("pytest_mooncake") / "data" / "edges.toml"))


def load_edges(path: Path | None = None) -> list[Edge]:
    """Every edge of the catalogue at ``path`` (default: the shipped one), validated field by
    field: a malformed entry is an ``EdgesError`` naming it."""
    path = path or default_path()
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise EdgesError(f"{path}: not valid TOML: {exc}") from None
    edges = []
    for req, entries in doc.items():
        if not isinstance(entries, list):
            raise EdgesError(f"{path}: {req} must be an array of tables ([[{req}]])")
        for i, raw in enumerate(entries):
            edges.append(_edge(req, raw, f"{path}: {req} entry {i + 1}"))
    return edges


def _edge(req: str, raw: dict, where: str) -> Edge:
    known = {"quantifier", "kind", "case", "states", "tests", "impossible", "pending"}
    extra = sorted(set(raw) - known)
    if extra:
        raise EdgesError(f"{where}: unknown field(s) {extra}; known: {sorted(known)}")
    for field in ("quantifier", "kind", "case"):
        if not isinstance(raw.get(field), str) or not raw[field].strip():
            raise EdgesError(f"{where}: {field} must be a non-empty string")
    kind, case = raw["kind"], raw["case"]
    if kind not in CASES and kind not in FREE_KINDS:
        raise EdgesError(f"{where}: kind {kind!r} is none of {sorted([*CASES, *FREE_KINDS])}")
    if kind in CASES and case not in CASES[kind]:
        raise EdgesError(f"{where}: case {case!r} is not a {kind} case {CASES[kind]}")
    tests = raw.get("tests", [])
    if not isinstance(tests, list) or not all(isinstance(t, str) and "::" in t for t in tests):
        raise EdgesError(f"{where}: tests must be a list of node ids (path::name)")
    given = [f for f in ("tests", "impossible", "pending") if raw.get(f)]
    if len(given) != 1:
        raise EdgesError(f"{where}: exactly one of tests, impossible, pending must be given "
                         f"(found {given or 'none'})")
    if tests and not raw.get("states"):
        raise EdgesError(f"{where}: an edge with tests says what they state (states)")
    return Edge(req, raw["quantifier"], kind, case, raw.get("states", ""), tuple(tests),
                raw.get("impossible", ""), raw.get("pending", ""))


def unknown_tests(edges: list[Edge], collected: set[str]) -> list[str]:
    """The named tests pytest did not collect. A test function's id (no ``[...]``) stands for
    its parametrizations: it must match at least one collected id."""
    functions = {c.split("[", 1)[0] for c in collected}
    return [f"{e}: {t}" for e in edges for t in e.tests
            if t not in collected and ("[" in t or t not in functions)]


def missing_cases(edges: list[Edge]) -> list[str]:
    """Cases a range, set or deadline quantifier leaves out, and cases listed twice."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for e in edges:
        if e.kind in CASES:
            groups.setdefault((e.requirement, e.quantifier, e.kind), []).append(e.case)
    out = []
    for (req, quantifier, kind), cases in groups.items():
        for case in CASES[kind]:
            n = cases.count(case)
            if n != 1:
                out.append(f"{req} {kind} {quantifier!r}: case {case!r} listed {n} times")
    return out


def uncovered_requirements(edges: list[Edge], requirements: set[str]) -> tuple[list[str], list[str]]:
    """(requirements with no edge, edge requirements the catalogue does not know)."""
    have = {e.requirement for e in edges}
    return sorted(requirements - have), sorted(have - requirements)


def coverage(edges: list[Edge]) -> dict[str, int]:
    """Counts for the docs and the check's report."""
    return {"edges": len(edges), "tested": sum(1 for e in edges if e.tests),
            "impossible": sum(1 for e in edges if e.impossible),
            "pending": sum(1 for e in edges if e.pending),
            "requirements": len({e.requirement for e in edges})}
