"""A fresh run's terminal summary flags, after the matrix, each failed test whose message the
harness-symptom vocabulary reads as ours (report/harness_symptom_lines.py); a failure that
speaks of the build gets no such line, and a run without harness messages prints no heading."""

from __future__ import annotations

import pytest

from pytest_mooncake.report.harness_symptom_lines import HEADING

SUITE = """
import pytest


@pytest.mark.mc_req("MR-1")
def test_bare():
    assert 1 == 2


@pytest.mark.mc_req("MR-2")
def test_worded():
    assert False, "the build served 3 of 40 objects after the failover"


@pytest.mark.mc_req("MR-3")
def test_unmeasured():
    pytest.fail("schedule 9 broke CO-9: stuck_slice: transfer 8 (write 8192 bytes A->B) "
                "never ended", pytrace=False)
"""


def test_harness_messages_are_flagged_after_the_matrix(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_symptoms=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-confirm=0", "--mc-seed=3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*mooncake conformance matrix*",
        "verdicts: 3 FAIL",
        HEADING,
        "  MR-1 test_symptoms.py::test_bare [[]reference[]]: bare-assertion: *assert 1 == 2 "
        "(fix: *",
        "  MR-3 test_symptoms.py::test_unmeasured [[]reference[]]: unmeasured-deadline: *",
    ])
    assert "test_worded [" not in result.stdout.str()


def test_a_run_whose_failures_speak_of_the_build_has_no_heading(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_symptoms=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-confirm=0", "-k", "worded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert HEADING not in result.stdout.str()
