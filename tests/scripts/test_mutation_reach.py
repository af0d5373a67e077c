"""The reach map (``scripts/mutants.py --reach``): a mechanical mutant runs only the suites tests
that execute its function, killers first; a function no test of its requirement executes
survives without a run. Reaches in child processes count: the reference engine runs there."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from mutation.reach import (  # noqa: E402
    OUTSIDE,
    ReachMap,
    check_kills,
    instrument,
    order_killers_first,
    probe_line,
    read_hits,
)

TOY = '''\
def add(a, b):
    return a + b


def double(n):
    """Twice n."""
    return n * 2


def unused(n):
    if n > 3:
        return 1
    return 0


def only_doc():
    """Nothing but a docstring."""


def one_liner(n): return n
'''

SUITE = '''\
import subprocess
import sys

import pytest

from toy.calc import add


@pytest.mark.mc_req("MR-1")
def test_nothing_reached():
    assert True


@pytest.mark.mc_req("MR-1")
def test_add():
    assert add(2, 2) == 4


@pytest.mark.mc_req("MR-2", "MR-1")
def test_double_in_a_child():
    out = subprocess.run([sys.executable, "-c", "from toy.calc import double; print(double(4))"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "8", out.stderr


@pytest.mark.mc_req("MR-3", "MR-2")
def test_add_for_another_requirement():
    assert add(1, 1) == 2
'''

SCOPE = '''\
[requirements.MR-1]
functions = ["toy/calc.py::add", "toy/calc.py::double", "toy/calc.py::unused"]
[requirements.MR-2]
functions = ["toy/calc.py::add"]
'''


def toy_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for path, text in {"toy/__init__.py": "", "toy/calc.py": TOY, "suites/test_toy.py": SUITE,
                       "mutants/mechanical/scope.toml": SCOPE, "cat/none.toml": ""}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    return repo


def test_the_probe_goes_first_in_the_body_after_the_docstring(tmp_path):
    base = tmp_path / "base"
    (base / "toy").mkdir(parents=True)
    (base / "toy" / "calc.py").write_text(TOY)
    reach_dir = tmp_path / "reach"
    reach_dir.mkdir()
    targets = [f"toy/calc.py::{f}" for f in ("add", "double", "only_doc", "one_liner")]
    tree, skipped = instrument(base, targets, tmp_path, reach_dir)
    assert skipped == ["toy/calc.py::one_liner"], "a body on the def line has no line of its own"
    text = (tree / "toy" / "calc.py").read_text()
    ast.parse(text)
    assert "def double(n):\n    \"\"\"Twice n.\"\"\"\n    __import__(" in text
    assert "def only_doc():\n    \"\"\"Nothing but a docstring.\"\"\"\n    __import__(" in text
    assert (base / "toy" / "calc.py").read_text() == TOY, "the base was written through"
    sys.path.insert(0, str(tree))
    try:
        namespace: dict = {}
        exec(compile(text, "calc.py", "exec"), namespace)
        (reach_dir / "current").write_text("suites/t.py::test_a")
        assert namespace["double"](3) == 6 and namespace["double"](4) == 8
        (reach_dir / "current").write_text("suites/t.py::test_b")
        namespace["double"](5)
        namespace["only_doc"]()
    finally:
        sys.path.remove(str(tree))
        sys.modules.pop("mc_mutation_reach_probe", None)
    (reach_dir / "tests.jsonl").write_text(
        json.dumps({"nodeid": "suites/t.py::test_b", "requirements": ["MR-1"]}) + "\n"
        + json.dumps({"nodeid": "suites/t.py::test_a", "requirements": ["MR-1"]}) + "\n")
    got = read_hits(reach_dir, "k", targets)
    assert got.tests == {"toy/calc.py::double": ["suites/t.py::test_b", "suites/t.py::test_a"],
                         "toy/calc.py::only_doc": ["suites/t.py::test_b"]}
    assert "toy/calc.py::add" not in got.tests


def test_probe_line_refuses_a_body_on_the_def_line():
    func = ast.parse("def f(n): return n\n").body[0]
    assert probe_line(func, ["def f(n): return n"]) is None


def test_selection_keeps_only_the_requirements_tests_and_puts_killers_first():
    reach = ReachMap("k", tests={"f": ["s::a", "s::b", "s::c"], "g": ["s::a"]},
                     everywhere={"g"}, instrumented={"f", "g"},
                     requirements={"s::a": ["MR-1"], "s::b": ["MR-2"], "s::c": ["MR-1", "MR-3"]})
    assert reach.judging("f", ["MR-1"]) == ["s::a", "s::c"]
    assert reach.judging("f", ["MR-4"]) == []
    assert not reach.selects("g"), "reached outside any test: every test may reach it"
    assert not reach.selects("h"), "not instrumented: no selection"
    assert order_killers_first(["s::a", "s::c"], {"s::c": 2}) == ["s::c", "s::a"]
    assert check_kills(reach, [("m1", "f", "s::b"), ("m2", "f", "d::e"),
                               ("m3", "g", "z::z")]) == [
        "m2: killed by d::e, which the reach map does not list for f"]


def test_a_kill_judged_before_its_test_was_parametrized_stands_for_its_cases():
    reach = ReachMap("k", tests={"f": ["s::a", "s::p[x]", "s::p[y]"]}, everywhere=set(),
                     instrumented={"f"}, requirements={"s::a": ["MR-1"], "s::p[x]": ["MR-1"],
                                                       "s::p[y]": ["MR-1"]})
    assert order_killers_first(reach.judging("f", ["MR-1"]), {"s::p": 3}) == [
        "s::p[x]", "s::p[y]", "s::a"]
    assert check_kills(reach, [("m1", "f", "s::p"), ("m2", "f", "s::p[z]"),
                               ("m3", "f", "s::pq")]) == [
        "m2: killed by s::p[z], which the reach map does not list for f",
        "m3: killed by s::pq, which the reach map does not list for f"]
    assert check_kills(reach, [("m2", "f", "d::e")]) == [
        "m2: killed by d::e, which the reach map does not list for f"]


def test_a_reach_map_run_selects_tests_across_processes_and_skips_the_unreached(tmp_path):
    repo = toy_repo(tmp_path)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    reach = tmp_path / "reach.json"
    result = tmp_path / "result.json"

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--root", str(repo),
             "--catalogue", str(repo / "cat"), "--source", "mechanical", "--json", str(result),
             "-j", "2", "--seed", "7", "--python", sys.executable, "--reach", str(reach),
             *extra], capture_output=True, text=True, timeout=600)

    proc = run()
    assert proc.returncode == 1, proc.stdout + proc.stderr  # unused's mutants survive
    assert "reach map: one instrumented run" in proc.stdout
    stored = json.loads(reach.read_text())
    assert stored["tests"] == {
        "toy/calc.py::add": ["suites/test_toy.py::test_add",
                             "suites/test_toy.py::test_add_for_another_requirement"],
        "toy/calc.py::double": ["suites/test_toy.py::test_double_in_a_child"]}
    assert stored["requirements"]["suites/test_toy.py::test_double_in_a_child"] == [
        "MR-2", "MR-1"], "a mark naming two requirements judges both"

    assert stored["requirements"]["suites/test_toy.py::test_add_for_another_requirement"] == [
        "MR-3", "MR-2"], "a mark naming two requirements judges both, not only its first"
    doc = json.loads(result.read_text())
    by_fn: dict[str, list[dict]] = {}
    for m in doc["mutants"]:
        by_fn.setdefault(m["id"].split("~")[1], []).append(m)
    assert by_fn["unused"] and all(
        m["status"] == "SURVIVED" and m["tests_run"] == 0
        and "no test of MR-1 executes toy/calc.py::unused" in m["detail"]
        for m in by_fn["unused"])
    assert all(m["status"] == "killed" and m["tests_run"] == 2 for m in by_fn["add"])
    assert all(m["status"] == "killed" and m["tests_run"] == 1 for m in by_fn["double"])
    assert {m["killed_by"] for m in by_fn["double"] if m["killed_by"]} == {
        "suites/test_toy.py::test_double_in_a_child"}
    assert (repo / "toy" / "calc.py").read_text() == TOY, "the tree itself was touched"
    again = run("--only", by_fn["add"][0]["id"])
    assert "reach map " + str(reach) + ": reused" in again.stdout, again.stdout


def test_a_function_reached_outside_any_test_is_never_narrowed(tmp_path):
    reach_dir = tmp_path
    (reach_dir / "tests.jsonl").write_text(
        json.dumps({"nodeid": "s.py::t", "requirements": ["MR-1"]}) + "\n")
    (reach_dir / "hits-1.tsv").write_text(f"toy/calc.py::add\t{OUTSIDE}\n"
                                          "toy/calc.py::add\ts.py::t\n")
    got = read_hits(reach_dir, "k", ["toy/calc.py::add"])
    assert got.everywhere == {"toy/calc.py::add"} and not got.selects("toy/calc.py::add")


def test_the_options_help_names_the_reach_map():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutants.py"), "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    assert "--reach MAP.json" in out
    assert "killed that function's other mutants first" in " ".join(out.split())
