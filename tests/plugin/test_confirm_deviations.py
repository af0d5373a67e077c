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


# --mc-confirm-only=witnesses: one failed test per failed cell is re-run first; the cells it
# confirms leave their other failed tests at one run, the others re-run them as `all` would.
WITNESS_SUITE = """
import pytest


@pytest.mark.mc_req("MR-2")
def test_mr2_quick():
    assert False, "MR-2 broken, found at once"


@pytest.mark.mc_req("MR-2")
def test_mr2_slow():
    sum(range(3_000_000))  # takes longer than its neighbour, so it is not the witness
    assert False, "MR-2 broken, found late"


@pytest.mark.mc_req("MR-3")
def test_mr3_flaky_quick(mc_config):
    assert mc_config.seed != 1, "MR-3 fails with seed 1 only"


@pytest.mark.mc_req("MR-3")
def test_mr3_steady_slow():
    sum(range(3_000_000))
    assert False, "MR-3 broken on every seed"


@pytest.mark.mc_req("MR-4")
def test_mr4_passes():
    pass
"""


def witness_report(pytester: pytest.Pytester, mode: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_suite=WITNESS_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-seed=1", "--mc-confirm=2",
                                f"--mc-confirm-only={mode}", "--mc-report=r.json")
    doc = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    return result, doc


def test_witnesses_confirm_each_cell_with_its_quickest_failure(pytester) -> None:
    result, doc = witness_report(pytester, "witnesses")
    runs = doc["reruns"]["runs"]
    # the two witnesses twice, then MR-3's other failure twice (its witness passed once)
    assert [r["tests"] for r in runs] == [2, 2, 1, 1], runs
    left = doc["reruns"]["not_rerun"]
    assert list(left) == ["test_suite.py::test_mr2_slow"], left
    assert "confirmed by test_suite.py::test_mr2_quick (failed in every run)" in \
        left["test_suite.py::test_mr2_slow"]
    verdicts = {r: e["verdict"] for r, e in doc["requirements"].items()}
    assert verdicts == {"MR-2": "FAIL", "MR-3": "FAIL", "MR-4": "pass"}, verdicts
    result.stdout.fnmatch_lines(["*witnesses: 2 of 4 failed test(s), one per failed cell*",
                                 "*1 failed test(s) of cells no witness confirmed*",
                                 "*not re-run: 1 failed test(s) of cells a witness confirmed*"])


def test_witnesses_give_the_requirement_verdicts_of_re_running_all(pytester) -> None:
    _, every = witness_report(pytester, "all")
    assert [r["tests"] for r in every["reruns"]["runs"]] == [4, 4]
    (pytester.path / "r.json").unlink()
    _, witnessed = witness_report(pytester, "witnesses")
    assert {r: e["verdict"] for r, e in every["requirements"].items()} == \
        {r: e["verdict"] for r, e in witnessed["requirements"].items()}
