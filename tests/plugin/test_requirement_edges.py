"""The edges catalogue (pytest_mooncake/data/edges.toml) against what pytest collects: every
requirement has edges, every edge names tests that exist (or says why none can), every range,
set and deadline lists all its cases. Node ids come from pytest's own collection of suites/ and
tests/ in a child run, before any deselection."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_mooncake.report.catalogue import load_catalogue
from pytest_mooncake.requirement_edges import (
    EdgesError,
    coverage,
    load_edges,
    missing_cases,
    uncovered_requirements,
    unknown_tests,
)

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("plugin/test_requirement_edges")

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR = textwrap.dedent('''
    import json, os
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(items):
        with open(os.environ["EDGES_COLLECTED"], "w") as f:
            json.dump([item.nodeid for item in items], f)
''')


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> set[str]:
    """Every node id of suites/ and tests/ as pytest collects them (before -m/-k/--mc-only)."""
    where = tmp_path_factory.mktemp("edges")
    (where / "edges_collector.py").write_text(COLLECTOR)
    out = where / "collected.json"
    env = {**__import__("os").environ, "EDGES_COLLECTED": str(out),
           "PYTHONPATH": f"{where}:{ROOT}"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "edges_collector", "-p", "pytest_mooncake", "suites", "tests"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), f"collection wrote nothing (exit {run.returncode}):\n{run.stdout[-3000:]}"
    ids = set(json.loads(out.read_text()))
    assert len(ids) > 1000, f"only {len(ids)} tests collected:\n{run.stdout[-3000:]}"
    return ids


@pytest.fixture(scope="module")
def edges():
    return load_edges()


def test_every_requirement_has_edges_and_no_edge_names_an_unknown_requirement(edges):
    missing, unknown = uncovered_requirements(edges, set(load_catalogue().requirements))
    assert not missing, f"requirements with no edge in edges.toml: {missing}"
    assert not unknown, f"edges.toml names requirements the catalogue does not have: {unknown}"


def test_every_edge_names_tests_that_exist(edges, collected):
    untested = [str(e) for e in edges if not (e.tests or e.impossible or e.pending)]
    assert not untested, f"edges that name no test: {untested}"
    unknown = unknown_tests(edges, collected)
    assert not unknown, "edges name tests pytest does not collect:\n" + "\n".join(unknown)


def test_every_range_set_and_deadline_lists_all_its_cases(edges):
    missing = missing_cases(edges)
    assert not missing, "\n".join(missing)


def test_no_edge_is_pending(edges):
    """Every edge has a test or says why none can exist: a ``pending`` entry is a gap."""
    pending = [f"{e}: {e.pending}" for e in edges if e.pending]
    assert not pending, f"{coverage(edges)}\n" + "\n".join(pending)


def test_a_malformed_edge_is_named(tmp_path):
    bad = tmp_path / "edges.toml"
    bad.write_text('[["MR-1"]]\nquantifier = "q"\nkind = "range"\ncase = "middle"\n'
                   'states = "s"\ntests = ["suites/x.py::t"]\n')
    with pytest.raises(EdgesError, match=r"MR-1 entry 1: case 'middle' is not a range case"):
        load_edges(bad)
    bad.write_text('[["MR-1"]]\nquantifier = "q"\nkind = "only"\ncase = "c"\nstates = "s"\n')
    with pytest.raises(EdgesError, match="exactly one of tests, impossible, pending"):
        load_edges(bad)


def test_a_function_id_stands_for_its_parametrizations_only_when_it_has_some():
    from pytest_mooncake.requirement_edges import Edge

    e = Edge("MR-1", "q", "only", "c", "s", ("a.py::t", "a.py::u[1]", "a.py::v"))
    assert unknown_tests([e], {"a.py::t[x]", "a.py::u[1]", "a.py::v"}) == []
    assert unknown_tests([e], {"a.py::t[x]", "a.py::u[2]"}) == [f"{e}: a.py::u[1]",
                                                                 f"{e}: a.py::v"]
