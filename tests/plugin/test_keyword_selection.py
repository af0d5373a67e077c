"""Requirement IDs are ``-k`` keywords, so ``-k MP-2`` selects the tests that name MP-2."""

from __future__ import annotations

import pytest

SUITE = """
import pytest

@pytest.mark.mc_req("MR-3")
def test_cache():
    pass

@pytest.mark.mc_req("MP-1", "MP-2")
def test_promotion():
    pass

@pytest.mark.mc_req("CO-4")
def test_completion():
    pass

def test_unmarked():
    pass
"""


def test_k_selects_tests_by_requirement_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-k", "MP-2", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_promotion PASSED*", "*3 deselected*"])
    result = pytester.runpytest("-k", "MR-3 or CO-4", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*test_promotion*")


def test_k_on_a_requirement_no_test_names_selects_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-k", "MR-9")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*4 deselected*"])
