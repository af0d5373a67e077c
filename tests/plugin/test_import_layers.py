"""The house rules, read from the source with ast (nothing is imported, so no import side effect
hides or causes a problem):

- no import cycle in pytest_mooncake or reference_engine (function-local and ``if
  TYPE_CHECKING:`` imports count: a circle closed inside a function or only for the type checker
  is still two modules that cannot be understood one without the other);
- no module of pytest_mooncake imports from a layer above its own (``LAYERS``, documented in the
  docs/reference/layout.md), nor from a package beside it in the same row;
- runtime/ and schemas/ never import pytest (the standalone packages build on them);
- reference_engine never imports pytest or pytest_mooncake; only targets/reference/ imports
  reference_engine; suites/ never do;
- no two modules (or packages) of pytest_mooncake share a name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pytest_mooncake", "reference_engine")

LAYERS: list[tuple[str, ...]] = [
    ("runtime", "schemas"),                   # processes, ports, deadlines, servers; TOML schemas
    ("report",),                              # catalogue, verdict rule, matrix, n/a, logs, allure
    ("verbs", "releases", "nodes", "container_engine"),  # standalone packages: ONLY_RUNTIME
    ("toxiproxy", "chaos", "lab", "master_rpc", "tcp_wire", "images", "requirement_edges"),  # fault
                                              # server; Jepsen runs; netns lab; mooncake_master's
                                              # own RPC (client, probe); the data port's framing;
                                              # Mooncake release images built here;
                                              # each requirement's edges and their tests
    ("targets", "cluster"),                   # the Target API and implementations; cluster CLI
    ("config", "kube_manifests"),             # options, markers, stash keys, run matrices;
                                              # Kubernetes manifests from a cluster file
    ("fixtures", "planting", "waits", "raw_peers", "acknowledged_puts",
     "landed_writes"),  # fixtures, helpers suites import
    ("plugin", "__init__"),                   # the pytest hooks; the entry point
]
"""Lowest first. A module of pytest_mooncake (keyed by the first name under the package:
``pytest_mooncake.targets.mooncake.adapter`` -> ``targets``; a top-level module by its own name)
may import its own package and the rows below its own, nothing else. A new package is one more
name in a row."""

ONLY_RUNTIME = ("verbs", "releases", "nodes", "container_engine")
"""Standalone packages: of the plugin they may import only runtime/ (and schemas/)."""

PYTEST_FREE = ("runtime", "schemas")

# ------------------------------------------------------------------------------ the graph


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = {name: path for package in PACKAGES for name, path in _modules(package).items()}


def imports_of(name: str, path: Path) -> set[str]:
    """Every module (of any package) ``name`` imports, resolved to a module where it can be."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in MODULES else module)
    found.discard(name)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start] & graph.keys())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child] & graph.keys()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def layer_key(module: str) -> str | None:
    """The LAYERS name of a pytest_mooncake module; None outside the package."""
    parts = module.split(".")
    if parts[0] != "pytest_mooncake":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


ROW = {name: row for row, names in enumerate(LAYERS) for name in names}


# ------------------------------------------------------------------------------ the rules


def test_the_walker_sees_known_edges() -> None:
    """A check that the graph is read at all (a walker that found nothing would pass)."""
    assert "pytest_mooncake.runtime.deadlines" in GRAPH["pytest_mooncake.runtime.processes"]
    assert "pytest_mooncake.targets.base" in GRAPH["pytest_mooncake.fixtures.engine_factories"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_cycles() -> None:
    found = [sorted(c) for c in cycles(GRAPH)]
    assert not found, f"import cycles: {found}"


def test_every_package_of_the_plugin_has_a_layer() -> None:
    keys = {layer_key(m) for m in MODULES if m.startswith("pytest_mooncake")}
    missing = sorted(k for k in keys if k not in ROW)
    assert not missing, (f"no row in LAYERS for {missing}: add each name to the row of what it "
                         f"may import (tests/plugin/test_import_layers.py and docs/reference/layout.md)")


def test_no_module_imports_from_a_layer_above_or_beside_it() -> None:
    problems = []
    for module, imported in sorted(GRAPH.items()):
        mine = layer_key(module)
        if mine is None or mine not in ROW:
            continue
        for target in sorted(imported):
            theirs = layer_key(target)
            if theirs is None or theirs == mine or theirs not in ROW:
                continue
            if ROW[theirs] >= ROW[mine]:
                problems.append(f"{module} ({mine}) imports {target} ({theirs})")
            elif mine in ONLY_RUNTIME and theirs not in PYTEST_FREE:
                problems.append(f"{module} ({mine}) may import only runtime/schemas, not {target}")
    assert not problems, "layer violations:\n  " + "\n  ".join(problems)


def test_runtime_and_schemas_run_without_pytest() -> None:
    offenders = [m for m, imported in GRAPH.items() if layer_key(m) in PYTEST_FREE
                 and any(i == "pytest" or i.startswith(("pytest.", "_pytest")) for i in imported)]
    assert not offenders, f"import pytest: {offenders}"


def test_package_boundaries() -> None:
    problems = []
    for module, imported in GRAPH.items():
        for target in imported:
            root = target.split(".")[0]
            if module.startswith("reference_engine") and root in ("pytest", "pytest_mooncake"):
                problems.append(f"{module} imports {target}")
            if module.startswith("pytest_mooncake") and root == "reference_engine" and \
                    not module.startswith("pytest_mooncake.targets.reference"):
                problems.append(f"{module} imports {target} (only targets/reference/ may)")
    for path in sorted((ROOT / "suites").rglob("*.py")):
        if "reference_engine" in {i.split(".")[0] for i in imports_of("suites", path)}:
            problems.append(f"{path.relative_to(ROOT)} imports reference_engine")
    assert not problems, "\n".join(problems)


def test_no_two_modules_of_the_plugin_share_a_name() -> None:
    names: dict[str, list[str]] = defaultdict(list)
    for module, path in MODULES.items():
        if not module.startswith("pytest_mooncake.") or path.name == "__main__.py":
            continue
        names[module.rsplit(".", 1)[-1]].append(module)
    shared = {name: sorted(ms) for name, ms in names.items() if len(ms) > 1}
    assert not shared, f"modules (or packages) sharing a name: {shared}"
