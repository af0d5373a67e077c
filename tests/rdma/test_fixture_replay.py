"""End to end through the plugin: mc_completions on reference:legacy finds a violation, prints
its token; --mc-replay=TOKEN runs exactly that schedule again."""

import re

import pytest

SUITE = """
import pytest

@pytest.mark.mc_req("CO-4")
def test_stale_completion(mc_completions):
    result = mc_completions.explore("stale_completion_after_retry", schedules=50)
    if result.found:
        print("TOKEN=" + result.token)
        print("VIOLATION=" + result.violation.kind)
    assert not result.found, result.violation
"""


def test_explore_then_replay_through_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    first = pytester.runpytest("--mc-target=reference:legacy", "--mc-seed=5", "-s")
    first.assert_outcomes(failed=1)
    out = first.stdout.str()
    token = re.search(r"TOKEN=(\S+)", out).group(1)
    kind = re.search(r"VIOLATION=(\S+)", out).group(1)
    again = pytester.runpytest("--mc-target=reference:legacy", f"--mc-replay={token}", "-s")
    again.assert_outcomes(failed=1)
    assert f"VIOLATION={kind}" in again.stdout.str()
    good = pytester.runpytest("--mc-target=reference", "--mc-seed=5")
    good.assert_outcomes(passed=1)
