"""A counterexample is FAIL (``verdict_rule``): a test that failed after it saw the build break
an invariant under a recorded interleaving is FAIL whatever other runs show, and is not re-run.

Through pytester on the reference engine's ``legacy`` profile, whose pinned stale-completion
interleaving breaks CO-9: one test meets it only the first time it runs in its directory (the
way a build meets a race with a probability), beside a plain assertion that fails only the
first time. Without the rule both would read intermittent; the counterexample reads FAIL with
its replay token in the JSON report and a reason for not re-running it, the plain flake stays
intermittent. A token recorded by a test that then *passed* changes nothing."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

SUITE = """
import pathlib

import pytest


def first_time(name):
    marker = pathlib.Path(name)
    first = not marker.exists()
    marker.touch()
    return first


@pytest.mark.mc_req("CO-9")
def test_meets_the_race_the_first_time(mc_completions):
    if first_time("met-race"):
        run = mc_completions.run_interleaving("stale_completion_after_retry")
        assert run.ok, f"the interleaving broke CO-9: {run.violations}"


@pytest.mark.mc_req("CO-5")
def test_a_violation_the_test_expects_is_no_finding(mc_completions):
    run = mc_completions.run_interleaving("stale_completion_after_retry")
    assert not run.ok


@pytest.mark.mc_req("MR-4")
def test_fails_the_first_time():
    assert not first_time("plain-flake"), "the first run in this directory"
"""


def _valid(doc: dict) -> dict:
    errors = sorted(VALIDATOR.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    return doc


def _tests(doc: dict, req: str) -> list[dict]:
    return doc["requirements"][req]["tests"]


def test_a_counterexample_is_fail_and_not_re_run_while_a_plain_flake_is_intermittent(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_race=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-target=reference:legacy",
                                "--mc-seed=7", "--mc-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "not re-run: 1 failed test(s) that found a counterexample (FAIL whatever a re-run shows)",
        "re-run 1 of 2: 1 failed test(s) with --mc-seed=7 ...",
    ])
    result.stdout.fnmatch_lines(["MR-4 *intermittent 1/3*", "CO-5 *pass (1)*",
                                 "CO-9 *FAIL (1/1)*"])
    doc = _valid(json.loads((pytester.path / "r.json").read_text()))
    assert {r: e["verdict"] for r, e in doc["requirements"].items()} == {
        "CO-5": "pass", "CO-9": "FAIL", "MR-4": "intermittent"}
    [found] = _tests(doc, "CO-9")
    assert found["counterexample"].startswith("mcs1."), found
    assert "runs" not in found  # not re-run
    nodeid = "test_race.py::test_meets_the_race_the_first_time"
    assert doc["reruns"]["not_rerun"][nodeid].startswith(
        f"found a counterexample (--mc-replay={found['counterexample']})")
    [flake] = _tests(doc, "MR-4")
    assert "counterexample" not in flake and len(flake["runs"]) == 3
    assert "counterexample" not in _tests(doc, "CO-5")[0]


def test_without_re_runs_the_counterexample_is_still_marked(pytester: pytest.Pytester) -> None:
    """``--mc-confirm=0``: one run decides; the report still names the interleaving."""
    pytester.makepyfile(test_race=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-target=reference:legacy",
                                "--mc-confirm=0", "--mc-report=r.json", "-k", "race")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    doc = _valid(json.loads((pytester.path / "r.json").read_text()))
    assert doc["requirements"]["CO-9"]["verdict"] == "FAIL"
    assert _tests(doc, "CO-9")[0]["counterexample"].startswith("mcs1.")
    assert "not_rerun" not in doc["reruns"]
