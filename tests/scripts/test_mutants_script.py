"""scripts/mutants.py: the catalogue applies to this tree, broken anchors are reported by name, and
the runner tells a suite kill, a project-test kill, a hang and a survivor apart (on a toy
repository, so this runs in seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


sys.path.insert(0, str(ROOT / "scripts"))
from mutation import catalogue as mutants  # noqa: E402


def test_the_catalogue_applies_to_this_tree_and_spans_the_families():
    catalogue = mutants.load_catalogue(ROOT / "mutants", mutants.known_requirements(ROOT))
    assert not mutants.check(catalogue, ROOT)
    assert len(catalogue) >= 60
    families = {m.requirements[0].split("-")[0] for m in catalogue}
    assert families == {"MR", "CO", "MP"}
    assert {m.kind for m in catalogue} == set(mutants.KINDS)
    assert all(m.why and m.breaks for m in catalogue)
    for m in catalogue:
        assert m.id.startswith(m.requirements[0] + "-"), m.id
        assert all(h.file.startswith("reference_engine/") and "/sim/" not in h.file
                   for h in m.hunks), f"{m.id}: mutants patch the engine, not its harness"


def write_catalogue(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "T.toml").write_text(textwrap.dedent(text))
    return directory


def one_mutant(tmp_path: Path, find: str, source: str) -> tuple[list, Path]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "suites").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(source)
    cat = write_catalogue(tmp_path / "cat", f"""
        [[mutant]]
        id = "MR-1-x"
        requirements = ["MR-1"]
        kind = "logic"
        why = "w"
        breaks = "b"
        file = "pkg/mod.py"
        [[mutant.patch]]
        find = '''
        {find}
        '''
        replace = '''
        x = 2
        '''
        """)
    return mutants.load_catalogue(cat), tmp_path


@pytest.mark.parametrize(("source", "count"), [("y = 1\n", 0), ("x = 1\nx = 1\n", 2)])
def test_an_anchor_that_does_not_occur_exactly_once_is_named(tmp_path, source, count):
    catalogue, root = one_mutant(tmp_path, "x = 1", source)
    [problem] = mutants.check(catalogue, root)
    assert "MR-1-x" in problem and "pkg/mod.py" in problem and f"occurs {count} times" in problem
    assert "'x = 1'" in problem


def test_an_anchor_inside_a_line_is_refused(tmp_path):
    catalogue, root = one_mutant(tmp_path, "x = 1", "def f():\n    yx = 1\n")
    [problem] = mutants.check(catalogue, root)
    assert "beginning of a line" in problem


def test_a_patch_that_does_not_compile_is_refused(tmp_path):
    catalogue, root = one_mutant(tmp_path, "x = 1", "if True:\nx = 1\n")
    [problem] = mutants.check(catalogue, root)
    assert "does not compile" in problem


TOY_MODULE = """\
def add(a, b):
    return a + b


def bounded(n):
    return min(n, 10)


def spin():
    return 1
"""

TOY_SUITE = """\
import pytest

from toy.calc import add, spin


@pytest.mark.mc_req("MR-1")
def test_add():
    assert add(2, 2) == 4


@pytest.mark.mc_req("MR-2")
def test_spin():
    assert spin() == 1
"""

TOY_TESTS = """\
from toy.calc import bounded


def test_bounded():
    assert bounded(12) == 10
"""

TOY_CATALOGUE = """\
[[mutant]]
id = "MR-1-subtracts"
requirements = ["MR-1"]
kind = "logic"
why = "w"
breaks = "b"
file = "toy/calc.py"
[[mutant.patch]]
find = '''
    return a + b
'''
replace = '''
    return a - b
'''

[[mutant]]
id = "MR-1-unbounded"
requirements = ["MR-1"]
kind = "boundary"
why = "w"
breaks = "b"
file = "toy/calc.py"
tests = ["tests/test_calc.py"]
[[mutant.patch]]
find = '''
    return min(n, 10)
'''
replace = '''
    return n
'''

[[mutant]]
id = "MR-2-spins"
requirements = ["MR-2"]
kind = "failure-path"
why = "w"
breaks = "b"
file = "toy/calc.py"
deadline = 8
[[mutant.patch]]
find = '''
    return 1
'''
replace = '''
    while True:
        pass
'''

[[mutant]]
id = "MR-1-harmless"
requirements = ["MR-1"]
kind = "logic"
why = "w"
breaks = "b"
file = "toy/calc.py"
[[mutant.patch]]
find = '''
def spin():
'''
replace = '''
def spin():  # a comment changes nothing
'''
"""


def toy_repo(tmp_path: Path, suite: str = TOY_SUITE) -> Path:
    repo = tmp_path / "repo"
    for path, text in {"toy/__init__.py": "", "toy/calc.py": TOY_MODULE,
                       "suites/test_toy.py": suite, "tests/test_calc.py": TOY_TESTS,
                       "cat/T.toml": TOY_CATALOGUE}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    return repo


def test_the_runner_tells_kills_hangs_and_survivors_apart(tmp_path):
    repo = toy_repo(tmp_path)
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--root", str(repo),
         "--catalogue", str(repo / "cat"), "--json", str(result), "-j", "2", "--seed", "3"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one survivor
    doc = json.loads(result.read_text())
    got = {m["id"]: (m["status"], m["killed_by"], m["phase"]) for m in doc["mutants"]}
    assert got["MR-1-subtracts"] == ("killed", "suites/test_toy.py::test_add", "suites")
    assert got["MR-1-unbounded"] == ("killed", "tests/test_calc.py::test_bounded", "tests")
    assert got["MR-2-spins"][0] == "killed (hang)"
    assert got["MR-1-harmless"][0] == "SURVIVED"
    assert doc["summary"]["killed"] == 3 and doc["summary"]["killed_by_suites"] == 2
    assert doc["summary"]["suite_kill_rate"] == 50.0 and doc["seed"] == 3
    assert "| MR-1-harmless" in proc.stdout and "SURVIVED" in proc.stdout
    assert "suites alone: 2/4 killed (50.0%)" in proc.stdout
    assert (repo / "toy" / "calc.py").read_text() == TOY_MODULE, "the tree itself was touched"


def test_a_suite_that_fails_without_any_mutant_stops_the_run(tmp_path):
    """The baseline: a judging test that fails on the unmutated tree (a missing dependency,
    a broken fixture) would count as a kill of every mutant; the run refuses instead."""
    repo = toy_repo(tmp_path, TOY_SUITE.replace("assert add(2, 2) == 4", "assert add(2, 2) == 5"))
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--root", str(repo),
         "--catalogue", str(repo / "cat"), "--json", str(result), "--seed", "3",
         "--python", sys.executable],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the suites fail without any mutant" in proc.stderr
    assert "suites/test_toy.py::test_add" in proc.stderr
    assert "baseline:" in proc.stdout and not result.exists()
    assert "[1/" not in proc.stdout, "mutants ran after a failed baseline"


def run_toy(repo: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--root", str(repo),
         "--catalogue", str(repo / "cat"), "--json", str(tmp_path / "result.json"), "-j", "1",
         "--python", sys.executable, "--only", "MR-1-subtracts,MR-1-unbounded,MR-1-harmless",
         *extra], capture_output=True, text=True, timeout=300)


def test_a_journaled_run_resumes_where_it_stopped(tmp_path):
    """A run stopped mid-way (here: its journal loses its last line and has another cut short,
    as a SIGKILL leaves it) judges only what is missing, and the result holds all of them."""
    repo = toy_repo(tmp_path)
    journal = tmp_path / "run.jsonl"
    first = run_toy(repo, tmp_path, "--journal", str(journal), "--seed", "5")
    assert first.returncode == 1, first.stdout + first.stderr  # MR-1-harmless survives
    lines = journal.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["journal"] == 1 and head["seed"] == 5 and head["suites_only"] is False
    judged = {json.loads(ln)["id"]: ln for ln in lines[1:]}
    assert set(judged) == {"MR-1-subtracts", "MR-1-unbounded", "MR-1-harmless"}
    keep = judged.pop("MR-1-subtracts")
    cut = judged.pop("MR-1-unbounded")[:40]  # a line cut short, no newline
    journal.write_text("\n".join([lines[0], keep, cut]))
    again = run_toy(repo, tmp_path, "--journal", str(journal))  # the seed comes from it
    assert again.returncode == 1, again.stdout + again.stderr
    assert "1 of 3 judged before" in again.stdout and "1 line(s) cut short" in again.stdout
    ran = [ln for ln in again.stdout.splitlines() if ln.startswith("[")]
    assert len(ran) == 2 and not any("MR-1-subtracts" in ln for ln in ran), ran
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["seed"] == 5
    assert {m["id"]: m["status"] for m in doc["mutants"]} == {
        "MR-1-subtracts": "killed", "MR-1-unbounded": "killed", "MR-1-harmless": "SURVIVED"}
    assert "| MR-1 |" not in again.stdout  # curated source: no per-requirement table
    done = run_toy(repo, tmp_path, "--journal", str(journal))
    assert "3 of 3 judged before" in done.stdout and "baseline:" not in done.stdout


def test_a_journal_of_other_settings_is_refused_by_name(tmp_path):
    repo = toy_repo(tmp_path)
    journal = tmp_path / "run.jsonl"
    journal.write_text(json.dumps({"journal": 1, "seed": 5, "suites_only": False,
                                   "deadline": 420.0}) + "\n")
    proc = run_toy(repo, tmp_path, "--journal", str(journal), "--suites-only")
    assert proc.returncode == 2
    assert "suites_only: journal False, this run True" in proc.stderr
    assert journal.read_text().count("\n") == 1, "the journal was touched"
    journal.write_text("not json\n")
    proc = run_toy(repo, tmp_path, "--journal", str(journal))
    assert proc.returncode == 2 and "not a mutants journal" in proc.stderr


def test_the_requirement_table_counts_each_outcome_under_each_requirement():
    from mutation.report import requirement_table
    from mutation.runner import Result
    results = [Result("a", ["MR-2"], "compare", "killed", phase="suites"),
               Result("b", ["MR-2", "MR-10"], "delete", "killed (hang)", phase="suites"),
               Result("c", ["MR-10"], "return", "killed", phase="tests"),
               Result("d", ["MR-2"], "constant", "SURVIVED"),
               Result("e", ["MR-2"], "arith", "ERROR")]
    text = requirement_table(results, {"f": ("equivalent", ["MR-2"]),
                                       "g": ("beyond-requirements", ["MR-10"])})
    rows = {ln.split(" | ")[0].strip("| "): ln.strip("|").split(" | ")[1:]
            for ln in text.splitlines()[2:]}
    assert list(rows)[:2] == ["MR-2", "MR-10"], "requirements in number order"
    # generated, by suites, by tests, hangs, survived, equivalent, beyond, error, rate, strict
    assert [c.strip() for c in rows["MR-2"]] == ["5", "2", "0", "1", "1", "1", "0", "1", "67 %",
                                                  "67 %"]
    assert [c.strip() for c in rows["MR-10"]] == ["3", "1", "1", "1", "0", "0", "1", "0", "50 %",
                                                   "33 %"]
    # a [[tested]] entry scoped beyond the requirements: its project-test kill is set aside
    text = requirement_table(results, {"g": ("beyond-requirements", ["MR-10"])},
                             frozenset({"c"}))
    rows = {ln.split(" | ")[0].strip("| "): ln.strip("|").split(" | ")[1:]
            for ln in text.splitlines()[2:]}
    assert [c.strip() for c in rows["MR-10"]] == ["3", "1", "0", "1", "0", "0", "2", "0",
                                                   "100 %", "33 %"]


def test_the_summary_sets_aside_project_test_kills_scoped_beyond_the_requirements():
    from mutation.report import summary
    from mutation.runner import Result
    results = [Result("a", ["MR-2"], "compare", "killed", phase="suites"),
               Result("b", ["MR-2"], "delete", "killed", phase="tests"),
               Result("c", ["MR-2"], "return", "killed", phase="tests"),
               Result("d", ["MR-2"], "constant", "killed", phase="suites")]
    plain = summary(results)
    assert plain["suite_kill_rate"] == plain["suite_kill_rate_of_requirements"] == 50.0
    scoped = summary(results, frozenset({"c", "d"}))  # d: the suites killed it, it counts
    assert scoped["beyond_held_by_tests"] == 1
    assert scoped["suite_kill_rate"] == 50.0
    assert scoped["suite_kill_rate_of_requirements"] == round(200 / 3, 1)
