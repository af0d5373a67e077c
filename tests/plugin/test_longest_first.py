"""--mc-durations: the longest tests run first, xdist sends one at a time, the verdicts stay."""

import json
import re

import pytest

from pytest_mooncake.config import longest_first

TESTS = """
def test_short():
    print("RAN short")

def test_long():
    print("RAN long")

def test_unknown():
    print("RAN unknown")
"""


def table(pytester: pytest.Pytester, durations: dict[str, float]) -> str:
    path = pytester.path / "durations.json"
    path.write_text(json.dumps({"reference": {
        f"test_order.py::{name}": s for name, s in durations.items()}}))
    return str(path)


def ran(result) -> list[str]:
    return re.findall(r"RAN (\w+)", result.stdout.str())


def test_a_durations_file_runs_the_longest_test_first(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_order=TESTS)
    spec = table(pytester, {"test_short": 0.2, "test_long": 30.0})
    result = pytester.runpytest("-s", f"--mc-durations={spec}")
    result.assert_outcomes(passed=3)
    # test_unknown counts as UNKNOWN_S (1 s): between the two the table knows
    assert ran(result) == ["long", "unknown", "short"]


def test_none_keeps_pytests_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_order=TESTS)
    spec = table(pytester, {"test_short": 0.2, "test_long": 30.0})
    assert ran(pytester.runpytest("-s", "--mc-durations=none")) == ["short", "long", "unknown"]
    # auto orders only xdist runs: a serial run keeps pytest's order
    assert spec and ran(pytester.runpytest("-s")) == ["short", "long", "unknown"]


def test_a_report_orders_by_its_durations_for_any_build_of_the_family(
        pytester: pytest.Pytester) -> None:
    """A report of one build (its label in every node id) orders a run of another."""
    report = {"columns": {"mooncake-non-cuda==0.3.13.post1": {"requirements": {"MR-1": {
        "verdict": "pass", "tests": [
            {"nodeid": "s.py::test_a[mooncake-non-cuda==0.3.13.post1-x]", "duration_s": 3.0},
            {"nodeid": "s.py::test_b[mooncake-non-cuda==0.3.13.post1]", "duration_s": 9.0}]}},
        "pairs": {}}}}
    got = longest_first.table_from_report(report)
    assert got == {"build": {"s.py::test_a[x]": 3.0, "s.py::test_b": 9.0}}
    assert longest_first.family("mooncake-cuda13==0.3.14@defaults") == "build"
    assert longest_first.family("reference:legacy") == "reference"
    # a one-target run has no column in its node ids: the same key
    assert longest_first.key("s.py::test_a[mooncake-cuda13==0.3.14-x]",
                             "mooncake-cuda13==0.3.14") == longest_first.key("s.py::test_a[x]",
                                                                             "mooncake") == "s.py::test_a[x]"


def test_with_xdist_one_test_is_sent_at_a_time_and_verdicts_are_kept(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        print("CHUNK", session.config.option.maxschedchunk)
""")
    pytester.makepyfile(test_order=TESTS + "\ndef test_fails():\n    assert False\n")
    result = pytester.runpytest("-n", "2", "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*CHUNK 1"])
    kept = pytester.runpytest("-n", "2", "-s", "--maxschedchunk=3", "-p", "no:cacheprovider")
    kept.stdout.fnmatch_lines(["*CHUNK 3"])


def test_an_unreadable_durations_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_order=TESTS)
    result = pytester.runpytest("--mc-durations=missing.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-durations=missing.json: cannot read durations from*"])
    (pytester.path / "bad.json").write_text("[1, 2]")
    bad = pytester.runpytest("--mc-durations=bad.json")
    bad.stderr.fnmatch_lines(["*neither a --mc-report JSON*"])


def test_the_shipped_table_knows_the_long_suite_tests() -> None:
    shipped = longest_first.load_table("auto")
    build = shipped["build"]
    assert max(build, key=build.get).startswith("suites/")
    assert len(build) > 100 and len(shipped["reference"]) > 100
