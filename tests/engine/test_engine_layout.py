"""The layout of reference_engine, read from its source with ``ast`` (nothing is imported):

- no import circles, counting every import (module level, inside functions, under
  ``TYPE_CHECKING``): a circle of type-only imports is still two modules that need each other;
- the layer rules: no pytest or pytest_mooncake; the RDMA engine never imports its simulation
  harness (``rdma/sim/``; the CLI ``__main__`` drives both);
- no two modules share a name;
- no code asks which profile it has (``profile.name == ...``, ``== "rfc"``): a difference
  between the profiles is a strategy of the registry (``reference_engine/profiles.py``).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import reference_engine

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("engine/test_engine_layout")

ROOT = Path(reference_engine.__file__).parent
PACKAGE = "reference_engine"
PROFILE_NAMES = frozenset({"rfc", "legacy"})


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str
    """``path:line`` of the import statement."""


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (a package is its __init__)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_edges(root: Path, package: str) -> list[Edge]:
    """Every import of one module of ``package`` by another, wherever it is written."""
    modules = module_names(root, package)
    edges = []
    for source, path in modules.items():
        here = source if _is_package(path) else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in modules else base)
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != source:
                    edges.append(Edge(source, target, f"{path.relative_to(root.parent)}:{node.lineno}"))
    return edges


def import_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with more than one module."""
    graph: dict[str, list[Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, []).append(e)
        graph.setdefault(e.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph[v]:
            if e.target not in index:
                connect(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_one_cycle(graph, c) for c in components]


def _one_cycle(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    """A path inside ``component`` from its first module back to it."""
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for e in graph[v]:
                if e.target == start:
                    return [*paths[v], e]
                if e.target in component and e.target not in paths:
                    paths[e.target] = [*paths[v], e]
                    nxt.append(e.target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(cycle: list[Edge]) -> str:
    return " -> ".join([cycle[0].source, *(f"{e.target} ({e.where})" for e in cycle)])


# ---------------------------------------------------------------------- the checker itself


def test_the_cycle_finder_finds_a_planted_circle_and_names_where(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import B\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("B = 1\ndef f():\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    edges = import_edges(pkg, "pkg")
    assert {(e.source, e.target) for e in edges} == {
        ("pkg.sub", "pkg.sub.b"), ("pkg.a", "pkg.sub.b"), ("pkg.sub.b", "pkg.a"), ("pkg.c", "pkg.a")}
    (cycle,) = import_cycles(edges)
    assert describe(cycle) == "pkg.a -> pkg.sub.b (pkg/a.py:3) -> pkg.a (pkg/sub/b.py:3)"


# ---------------------------------------------------------------------- reference_engine


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    found = import_edges(ROOT, PACKAGE)
    assert len(found) > 100, f"only {len(found)} imports found: the walk judged nothing"
    return found


def test_reference_engine_has_no_import_circle(edges):
    cycles = import_cycles(edges)
    assert not cycles, "import circles:\n" + "\n".join(describe(c) for c in cycles)


def test_reference_engine_never_imports_pytest_or_the_plugin():
    bad = []
    for name, path in module_names(ROOT, PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            bad += [f"{name}:{node.lineno} imports {n}" for n in names
                    if n.split(".")[0] in ("pytest", "_pytest", "pytest_mooncake")]
    assert not bad, bad


def test_the_rdma_engine_never_imports_its_simulation_harness(edges):
    sim = f"{PACKAGE}.rdma.sim"
    inside = [e for e in edges if e.target == sim or e.target.startswith(sim + ".")]
    assert inside, "nothing imports rdma.sim: the check judged nothing"
    bad = [f"{e.source} imports {e.target} ({e.where})" for e in inside
           if not (e.source == sim or e.source.startswith(sim + ".")
                   or e.source == f"{PACKAGE}.rdma.__main__")]
    assert not bad, bad


def test_no_two_modules_share_a_name():
    names = Counter(path.stem if not _is_package(path) else path.parent.name
                    for path in module_names(ROOT, PACKAGE).values()
                    if path.stem != "__main__")
    names[PACKAGE] -= 1  # the top package itself
    assert not [n for n, count in names.items() if count > 1], sorted(
        (n, c) for n, c in names.items() if c > 1)


def profile_name_checks(source: str, filename: str) -> list[str]:
    """Comparisons that ask which profile this is: ``<...>profile.name`` or a profile's name
    as a string constant on either side of ``==``/``!=``/``in``."""

    def asks(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "name":
            owner = node.value
            return ((isinstance(owner, ast.Name) and "profile" in owner.id.lower())
                    or (isinstance(owner, ast.Attribute) and "profile" in owner.attr.lower()))
        if isinstance(node, ast.Constant):
            return node.value in PROFILE_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(asks(e) for e in node.elts)
        return False

    return [f"{filename}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(ast.parse(source, filename))
            if isinstance(node, ast.Compare) and any(asks(x) for x in (node.left, *node.comparators))]


def test_the_profile_check_sees_the_ways_of_asking():
    src = ("if self.profile.name == 'rfc': pass\nif name == 'legacy': pass\n"
           "if p.profile_name in ('rfc', 'x'): pass\nif profile.name != other: pass\n"
           "if self.profile.name: pass\nx = {'rfc': 1}\n")
    assert [line.split(":")[1] for line in profile_name_checks(src, "f.py")] == ["1", "2", "3", "4"]


def test_no_code_asks_which_profile_it_has():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += profile_name_checks(path.read_text(), str(path.relative_to(ROOT.parent)))
    assert not found, "make the difference a strategy in profiles.py instead:\n" + "\n".join(found)
