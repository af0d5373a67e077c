"""``--mc-confirm-only=deviations``: with ``--mc-expect`` the re-runs go only to failures the
expectations do not expect; a known FAIL keeps its one run and the report says so."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())

SUITE = """
import pytest


@pytest.mark.mc_req("MR-2")
def test_known_failure():
    assert False, "MR-2 known broken"


@pytest.mark.mc_req("MR-3")
@pytest.mark.parametrize("store", ["etcd", "http"])
def test_mr3(store):
    assert store != "etcd", "MR-3 broke on etcd"
"""

EXPECTED = """
default = "pass"

[requirements.MR-2]
verdict = "FAIL"
reason = "known"
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("expect.toml").write_text(EXPECTED)
    return pytester


def report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-seed=1", "--mc-confirm=1",
                                "--mc-expect=expect.toml", "--mc-report=r.json", *args)
    doc = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    return result, doc


def test_only_the_regression_is_re_run_and_the_known_fail_is_recorded(suite) -> None:
    result, doc = report(suite, "--mc-confirm-only=deviations")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # MR-3 regressed
    runs = doc["reruns"]["runs"]
    assert [r["tests"] for r in runs] == [1], runs  # test_mr3[etcd] alone
    left = doc["reruns"]["not_rerun"]
    assert list(left) == ["test_suite.py::test_known_failure"]
    assert "FAIL expected (MR-2 in expect.toml)" in left["test_suite.py::test_known_failure"]
    result.stdout.fnmatch_lines(["*not re-run: 1 failed test(s) whose FAIL the expectations "
                                 "expect (--mc-confirm-only=deviations)*",
                                 "*regression: *MR-3: expected pass, got FAIL*"])
    assert doc["requirements"]["MR-2"]["verdict"] == "FAIL"  # one run, still FAIL


def test_by_default_every_failure_is_re_run(suite) -> None:
    result, doc = report(suite)
    assert [r["tests"] for r in doc["reruns"]["runs"]] == [2]
    assert "not_rerun" not in doc["reruns"]


def test_a_per_test_expectation_of_pass_still_re_runs_it(suite) -> None:
    (suite.path / "expect.toml").write_text(EXPECTED.replace('verdict = "FAIL"', """verdict = ["FAIL", "pass"]
tests = { "test_suite.py::test_known_failure" = "pass" }"""))
    _, doc = report(suite, "--mc-confirm-only=deviations")
    assert [r["tests"] for r in doc["reruns"]["runs"]] == [2]


def test_deviations_without_expectations_is_a_usage_error(suite) -> None:
    result = suite.runpytest("-p", "no:cacheprovider", "--mc-confirm-only=deviations")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-confirm-only=deviations needs --mc-expect*"])
