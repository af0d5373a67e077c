"""What a reader of the Allure report gets: the tree RFC -> "MR-16 — title", the target, its
version and the seed on every result, the run's environment/executor/categories files, the
shipped Allure 3 grouping config, a passing test's own logs, and on a failing RDMA test the
command that replays its schedule (which does replay it) and the schedule's trace."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from pytest_mooncake.report.allure_run_files import ALLURERC

SUITE = """
import pytest

@pytest.mark.mc_req("MR-16")
def test_passes_with_an_engine(mc_engine):
    mc_engine("seg-a")

@pytest.mark.mc_req("CO-1")
def test_na(mc_target):
    from pytest_mooncake.targets.base import TargetLacks
    raise TargetLacks("rdma_control", "no hooks here")
"""

RDMA = """
import pytest

@pytest.mark.mc_req("CO-4")
def test_interleaving(mc_completions):
    run = mc_completions.run_interleaving("stale_completion_after_retry")
    assert not run.violations, "; ".join(v.kind for v in run.violations)
"""


def _results(directory: Path) -> dict[str, dict]:
    return {d["name"]: d for d in (json.loads(p.read_text())
                                   for p in directory.glob("*-result.json"))}


def _attachment(directory: Path, result: dict, name: str) -> str:
    found = [a for a in result.get("attachments", []) if a["name"] == name]
    assert found, f"no {name!r} among {[a['name'] for a in result.get('attachments', [])]}"
    return (directory / found[0]["source"]).read_text()


def test_labels_parameters_run_files_and_passing_logs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("--alluredir=allure", "--mc-seed=9",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"allure results in allure; grouped by RFC and requirement "
                                 f"with Allure 3: npx allure generate allure --config {ALLURERC}"])
    allure = pytester.path / "allure"
    results = _results(allure)
    passed = results["test_passes_with_an_engine"]
    labels = {(lab["name"], lab["value"]) for lab in passed["labels"]}
    assert ("feature", "MR-16 — end to end: peer killed and restarted recovers") in labels
    assert ("epic", "MR: metadata across node replacement") in labels
    params = {p["name"]: (p["value"], p.get("excluded", False)) for p in passed["parameters"]}
    assert params["target"] == ("'reference'", False)
    assert params["seed"] == ("'9'", True)
    assert params["target version"][0].startswith("'reference-engine 0.1.0") and \
        params["target version"][1]
    assert "seg-a" in _attachment(allure, passed, "engine seg-a log")
    assert not [a for a in passed.get("attachments", []) if a["name"] == "etcd log"]

    env = dict(line.split("=", 1) for line in
               (allure / "environment.properties").read_text().splitlines())
    assert env["mooncake.target"] == "reference" and env["mooncake.seed"] == "9"
    assert env["mooncake.target.version"].startswith("reference-engine")
    assert env["mooncake.verbs"] == "auto" and env["mooncake.etcd"].startswith("3.")
    assert json.loads((allure / "executor.json").read_text())["name"].startswith("pytest-mooncake")
    categories = json.loads((allure / "categories.json").read_text())
    assert [c["matchedStatuses"] for c in categories] == [["failed", "broken"], ["failed"],
                                                          ["broken"], ["skipped"]]
    assert [c.get("flaky") for c in categories] == [True, None, None, None]


def test_the_shipped_allure3_config_groups_by_rfc_then_requirement() -> None:
    config = json.loads(ALLURERC.read_text())
    assert config["plugins"]["awesome"]["options"]["groupBy"] == ["epic", "feature"]


def test_a_failing_rdma_test_attaches_a_replay_command_that_replays(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(RDMA)
    result = pytester.runpytest_subprocess("--alluredir=allure", "--mc-seed=3",
                                           "--mc-target=reference:legacy", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- RDMA replay command -*",
                                 "python -m pytest 'test_a_failing_rdma_test_attaches_a_replay_"
                                 "command_that_replays.py::test_interleaving' "
                                 "--mc-target=reference:legacy --mc-seed=3 --mc-replay=mcs1.*",
                                 "*- RDMA schedule trace -*"])
    allure = pytester.path / "allure"
    failed = _results(allure)["test_interleaving"]
    command = _attachment(allure, failed, "RDMA replay command").splitlines()[0]
    trace = _attachment(allure, failed, "RDMA schedule trace")
    assert trace.startswith("stale_completion_after_retry (legacy)")
    assert "violation: double_completion" in trace
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "pytest"]
    again = pytester.runpytest_subprocess(*argv[3:], "-p", "no:cacheprovider")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*double_completion*", f"*{argv[-1]}*"])
