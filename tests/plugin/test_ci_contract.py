"""The CI contract: ``--mc-fail-on`` turns a run that judged too little into exit status 6; the
JSON report validates against the shipped schema (one target, a matrix, skew pairs); the JUnit
XML carries the seed and the target's version."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources

import jsonschema
import pytest

from pytest_mooncake.report.ci_contract import EXIT_NOT_JUDGED

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

ALL_NA = """
import pytest
from pytest_mooncake.targets.base import TargetLacks

@pytest.mark.mc_req("MR-1")
@pytest.mark.mc_requires("version_skew")
def test_lacks_a_means():
    pass

@pytest.mark.mc_req("MR-2")
def test_factory_lacks(mc_target):
    raise TargetLacks("cache_control", "no cache TTL knob in this build")
"""

ONE_NA = """
import pytest

@pytest.mark.mc_req("MR-1")
def test_judged():
    pass

@pytest.mark.mc_req("MR-2")
@pytest.mark.mc_requires("version_skew")
def test_na():
    pass
"""


def _valid(doc: dict) -> dict:
    errors = sorted(VALIDATOR.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    return doc


def test_a_run_that_judged_nothing_exits_0_by_default_and_6_with_fail_on(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ALL_NA)
    assert pytester.runpytest("-p", "no:cacheprovider").ret == pytest.ExitCode.OK
    for rule in ("nothing", "na"):
        result = pytester.runpytest("-p", "no:cacheprovider", f"--mc-fail-on={rule}",
                                    "--mc-report=r.json")
        assert result.ret == EXIT_NOT_JUDGED, rule
        result.stdout.fnmatch_lines([f"--mc-fail-on={rule}: * problem(s), exit status 6:",
                                     "  [[]reference[]] judged nothing: no requirement passed "
                                     "or failed (2 requirement(s) named, 2 n/a)"])
        doc = _valid(json.loads((pytester.path / "r.json").read_text()))
        assert doc["fail_on"]["rule"] == rule and doc["fail_on"]["problems"]
        assert doc["summary"]["verdicts"]["n/a"] == 2


def test_na_names_every_na_requirement_and_its_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ONE_NA)
    assert pytester.runpytest("--mc-fail-on=nothing").ret == pytest.ExitCode.OK
    result = pytester.runpytest("--mc-fail-on=na")
    assert result.ret == EXIT_NOT_JUDGED
    result.stdout.fnmatch_lines(["  [[]reference[]] MR-2 n/a: *version_skew*"])
    result.stdout.no_fnmatch_line("*MR-1 n/a*")


def test_named_requirements_fail_only_when_they_are_na_or_did_not_run(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ONE_NA)
    assert pytester.runpytest("--mc-fail-on=na:MR-1").ret == pytest.ExitCode.OK
    result = pytester.runpytest("--mc-fail-on=na:mr-2,MR-3")
    assert result.ret == EXIT_NOT_JUDGED
    result.stdout.fnmatch_lines(["*MR-2 n/a:*", "  [[]reference[]] MR-3: no test of it ran"])


def test_ini_key_and_a_failing_run_keeps_exit_1(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmc_fail_on = na\n")
    pytester.makepyfile(ONE_NA + "\n@pytest.mark.mc_req('MR-3')\ndef test_fails():\n"
                                 "    assert False\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["--mc-fail-on=na: 1 problem(s), exit status 1:"])


def test_collect_only_lists_requirements_and_xdist_keeps_the_rule(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ALL_NA)
    collected = pytester.runpytest("--mc-fail-on=na", "--co")
    assert collected.ret == pytest.ExitCode.OK
    collected.stdout.fnmatch_lines(["collected 2 test(s) naming 2 requirement(s); no verdicts "
                                    "without running them (--collect-only):",
                                    "  MR-1 * 1 test(s)", "  MR-2 * 1 test(s)"])
    collected.stdout.no_fnmatch_line("*no collected test names a requirement*")
    result = pytester.runpytest_subprocess("--mc-fail-on=na", "-n", "2", "-p", "no:cacheprovider")
    assert result.ret == EXIT_NOT_JUDGED


@pytest.mark.parametrize(("value", "message"), [
    ("sometimes", "*--mc-fail-on must be never, nothing, na, na:ID,ID or intermittent (several "
                  "joined with +) (got 'sometimes')*"),
    ("na+often", "*--mc-fail-on must be never*(got 'na+often'); e.g. --mc-fail-on=na+intermittent*"),
    ("na:", "*--mc-fail-on must be never*(got 'na:')*"),
    ("na:MR-99", "*--mc-fail-on: unknown requirement(s) MR-99 (MR IDs run MR-1..*"),
])
def test_bad_values_are_usage_errors(pytester: pytest.Pytester, value: str, message: str) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest(f"--mc-fail-on={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_matrix_report_has_a_version_per_column_and_no_flat_target(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MR-7")
        def test_profile(mc_target):
            assert mc_target.label == "reference"
    """)
    pytester.runpytest("--mc-matrix=reference-profiles", "--mc-report=m.json", "--mc-seed=4")
    doc = _valid(json.loads((pytester.path / "m.json").read_text()))
    assert "target" not in doc and "requirements" not in doc
    assert doc["matrix"] == "reference-profiles" and doc["seed"] == 4
    assert {c: col["version"] for c, col in doc["columns"].items()} == {
        "reference": "reference-engine 0.1.0 (rfc)",
        "reference:legacy": "reference-engine 0.1.0 (legacy)"}
    assert doc["columns"]["reference:legacy"]["summary"]["verdicts"]["FAIL"] == 1
    assert doc["summary"]["verdicts"] == {"pass": 1, "FAIL": 1, "intermittent": 0, "n/a": 0,
                                          "error": 0}


def test_skew_pairs_validate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MR-17")
        @pytest.mark.mc_skew("metadata-rolling-upgrade")
        def test_pair(mc_skew):
            pass
    """)
    pytester.runpytest("--mc-report=s.json")
    doc = _valid(json.loads((pytester.path / "s.json").read_text()))
    assert doc["pairs"], doc


def test_the_schema_refuses_what_it_must() -> None:
    """The schema is no rubber stamp: each of these mutations of a valid report is refused."""
    test = {"nodeid": "t.py::t", "outcome": "passed", "duration_s": 0.1}
    summary = {"requirements": 1, "verdicts": {"pass": 1, "FAIL": 0, "intermittent": 0,
                                               "n/a": 0, "error": 0},
               "tests": {"passed": 1, "failed": 0, "skipped": 0, "error": 0}}
    good = {"schema_version": 2, "started": "2026-12-01T18:00:00+00:00", "duration_s": 1.0,
            "seed": 1, "target": "reference", "target_version": "x", "summary": summary,
            "requirements": {"MR-1": {"verdict": "pass", "tests": [test]}},
            "fail_on": {"rule": "never", "problems": []}}
    _valid(good)
    bad = [
        {k: v for k, v in good.items() if k != "schema_version"},
        {**good, "schema_version": 1},
        {**good, "requirements": {"MR-1": {"verdict": "flaky", "tests": [test]}}},
        {**good, "requirements": {"MR-1": {"verdict": "intermittent", "tests": [
            {**test, "runs": [{"seed": 1, "outcome": "passed", "duration_s": 0.1}]}]}}},
        {**good, "requirements": {"MR-1": {"verdict": "intermittent", "tests": [test],
                                           "confirmation": {"failed": 1, "judged": 2}}}},
        {**good, "summary": {**summary, "verdicts": {"pass": 1, "FAIL": 0, "n/a": 0,
                                                     "error": 0}}},
        {**good, "reruns": {"bound": -1, "runs": []}},
        {**good, "started": "yesterday"},
        {**good, "requirements": {"MR-1": {"verdict": "ok", "tests": [test]}}},
        {**good, "requirements": {"mr1": {"verdict": "pass", "tests": [test]}}},
        {**good, "columns": {"reference": {"target": "reference", "version": "x",
                                           "summary": summary, "requirements": {}}}},
        {k: v for k, v in good.items() if k != "target_version"},
    ]
    for doc in bad:
        assert list(VALIDATOR.iter_errors(doc)), doc


def test_junit_xml_carries_seed_and_target_version(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ONE_NA)
    for args in ((), ("-n", "2")):
        pytester.runpytest_subprocess("--mc-seed=77", "--junitxml=j.xml", "-p",
                                      "no:cacheprovider", *args)
        suite = ET.parse(pytester.path / "j.xml").getroot().find("testsuite")
        props = {p.get("name"): p.get("value") for p in suite.find("properties")}
        assert props["mooncake_seed"] == "77", args
        assert props["mooncake_target"] == "reference"
        assert props["mooncake_target_version"].startswith("reference-engine "), props
