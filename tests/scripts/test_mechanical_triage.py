"""The triage file of the mechanical mutants: [[tested]] entries attach project tests to a
mutant, and a --suites-only regression sample never draws a mutant only project tests kill."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from mutation.catalogue import CatalogueError  # noqa: E402
from mutation.mechanical import TRIAGE, generate, load_tested, load_tested_beyond, load_triage  # noqa: E402

import mutants as mutants_script  # noqa: E402


def test_every_tested_entry_names_a_mutant_of_this_tree_and_tests_that_exist():
    tested = load_tested(ROOT)
    assert tested, "the shipped triage file has [[tested]] entries"
    by_id = {m.id: m for m in generate(ROOT)}
    assert set(tested) <= set(by_id), sorted(set(tested) - set(by_id))
    assert not set(tested) & set(load_triage(ROOT)), "a mutant both triaged away and tested"
    for mid, tests in tested.items():
        assert by_id[mid].tests == tests
        for t in tests:
            path, _, name = t.partition("::")
            assert f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), t


def test_every_triaged_entry_names_a_mutant_of_this_tree():
    """A line a fix changed moves its mutants' ids: the old entries then match nothing and must
    go (the new ids are judged again), or the file says why of mutants that no longer exist."""
    ids = {m.id for m in generate(ROOT)}
    stale = sorted(set(load_triage(ROOT)) - ids)
    assert not stale, f"[[triaged]] entries matching no mutant of this tree: {stale}"


def test_a_tested_entry_without_tests_is_named(tmp_path):
    (tmp_path / TRIAGE).parent.mkdir(parents=True)
    (tmp_path / TRIAGE).write_text('[[tested]]\nid = "m"\nreason = "r"\ntests = ["suites/x.py::t"]\n')
    with pytest.raises(CatalogueError, match=r"\[\[tested\]\] needs id, reason and tests"):
        load_tested(tmp_path)


def test_a_tested_entry_may_be_scoped_beyond_the_requirements_and_nothing_else(tmp_path):
    (tmp_path / TRIAGE).parent.mkdir(parents=True)
    entry = '[[tested]]\nid = "{}"\nreason = "r"\ntests = ["tests/x.py::t"]\n'
    (tmp_path / TRIAGE).write_text(entry.format("a") + entry.format("b")
                                   + 'scope = "beyond-requirements"\n'
                                   + entry.format("c") + 'scope = "requirement"\n')
    assert set(load_tested(tmp_path)) == {"a", "b", "c"}, "a scoped entry is still judged"
    assert load_tested_beyond(tmp_path) == {"b"}
    (tmp_path / TRIAGE).write_text(entry.format("d") + 'scope = "beyond"\n')
    with pytest.raises(CatalogueError, match=r"d: scope must be 'requirement' or "
                                             r"'beyond-requirements'.*not 'beyond'"):
        load_tested_beyond(tmp_path)


def test_the_shipped_beyond_scoped_entries_say_no_requirement_speaks_of_what_they_change():
    """An entry is scoped beyond the requirements only with a reason that says so: its rate
    must not be bought by relabelling a requirement's mutant."""
    import tomllib
    doc = tomllib.loads((ROOT / TRIAGE).read_text("utf-8"))
    beyond = [e for e in doc["tested"] if e.get("scope") == "beyond-requirements"]
    assert beyond, "the shipped file scopes some entries beyond the requirements"
    for e in beyond:
        assert "no requirement" in e["reason"].lower() or "beyond" in e["reason"].lower(), e["id"]


def test_a_suites_only_sample_leaves_out_kills_by_project_tests(tmp_path):
    root = tmp_path / "repo"
    for part in ("reference_engine", "mutants"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    tested_id = next(iter(load_tested(root)))
    plain_id = next(m.id for m in generate(root) if not m.tests)
    judged = tmp_path / "judged.json"
    judged.write_text(json.dumps({"mutants": [
        {"id": tested_id, "status": "killed", "phase": "tests"},
        {"id": plain_id, "status": "killed", "phase": "suites"}]}))

    def ids(suites_only: bool) -> set[str]:
        args = argparse.Namespace(catalogue=root / "mutants", source="mechanical",
                                  operators=",".join(mutants_script.OPERATORS),
                                  killed_before=judged, suites_only=suites_only)
        return {m.id for m in mutants_script.load_mutants(args, root, None)}

    assert ids(False) == {tested_id, plain_id}
    assert ids(True) == {plain_id}
