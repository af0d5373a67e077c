"""The verdict of a requirement from its tests' outcomes per run (report/verdict_rule.py)."""

from pytest_mooncake.report.verdict_rule import verdict_of_runs

F, P, S = "failed", "passed", "skipped"


def test_a_test_failing_every_time_is_fail():
    assert verdict_of_runs([[F, F, F], [P, P, P]]) == "FAIL"


def test_a_test_seen_both_ways_is_intermittent_when_some_run_passed_everything():
    assert verdict_of_runs([[F, P, F], [P, P, P]]) == "intermittent"


def test_tests_failing_in_turns_fail_the_requirement_in_every_run():
    """0.3.13.post1's CO-9 in issue #23's scout: one exploration found the deadlock in runs 1
    and 2, the other in runs 1 and 3 (each exploration misses it sometimes): the requirement
    failed in 3 of 3 runs, which is FAIL reproduced, not intermittent."""
    assert verdict_of_runs([[F, F, P], [F, P, F], [P], [S]]) == "FAIL"


def test_a_test_never_re_run_counts_its_one_outcome_in_every_run():
    assert verdict_of_runs([[F], [F, P, P]]) == "FAIL"
    assert verdict_of_runs([[P], [F, P, P]]) == "intermittent"


def test_without_failures_the_first_outcomes_decide():
    assert verdict_of_runs([[P], [S]]) == "pass"
    assert verdict_of_runs([[S], [S]]) == "n/a"
    assert verdict_of_runs([]) is None


def test_a_counterexample_is_fail_whatever_the_other_runs_show():
    """0.3.13.post1@defaults' CO-9 in #23's proof (seed 3303): the exploration found the
    destroy-vs-event wedge in the run and missed it in both re-runs. Without the counterexample
    that read intermittent; the interleaving that broke CO-9 refutes it: FAIL."""
    assert verdict_of_runs([[F, P, P], [P]]) == "intermittent"
    assert verdict_of_runs([[F, P, P], [P]], [True, False]) == "FAIL"


def test_a_counterexample_counts_only_where_its_test_failed():
    """The flag is per test, in the order of the runs; a test that never failed has none."""
    assert verdict_of_runs([[P], [F, P]], [True, False]) == "intermittent"
    assert verdict_of_runs([[P], [F, P]], [False, True]) == "FAIL"
    assert verdict_of_runs([[P], [P]], [True, True]) == "pass"
