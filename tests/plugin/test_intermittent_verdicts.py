"""Stable verdicts (``--mc-confirm``): a requirement judged FAIL has its failed tests re-run,
first with the run's seed, then with seeds drawn from it, each re-run a fresh pytest session.

The suite below is flaky on purpose, each test in a known way: one fails only with the session
seed 4 (so the run and its same-seed re-run fail and a new seed passes), one fails only the
first time it runs in its directory (so even the same seed passes on a re-run), one fails on
every seed (recording the per-test seed each run gave it), one always passes. Through pytester:
FAIL reproduced stays FAIL; seen both ways is intermittent with k/N, the seeds of each outcome
and a replay command that reproduces each outcome; never failing stays pass and is not re-run;
``--mc-confirm=0`` keeps the old verdicts; the JSON report validates against schema v2; the
verdicts are the same under ``-n 2`` and in matrix columns and version-skew pair cells; JUnit
and Allure carry the re-runs; a run whose only failures are intermittent exits 0 unless
``--mc-fail-on=intermittent``."""

from __future__ import annotations

import json
import shlex
import sys
import xml.etree.ElementTree as ET
import zlib
from importlib import resources

import jsonschema
import pytest

from pytest_mooncake.report.ci_contract import EXIT_NOT_JUDGED
from pytest_mooncake.report.confirmation_runs import rerun_seeds
from pytest_mooncake.report.replay_commands import PytestCommand, without_options, without_paths

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

SEED = 4
NEW_SEED = rerun_seeds(SEED, 2)[1]

SUITE = """
import pathlib

import pytest


@pytest.mark.mc_req("MR-1")
def test_fails_with_seed_4(mc_config):
    assert mc_config.seed != 4, f"session seed {mc_config.seed}"


@pytest.mark.mc_req("MR-2")
def test_fails_on_every_seed(mc_seed):
    with open("every-seed.txt", "a") as f:
        f.write(f"{mc_seed}\\n")
    assert False, f"per-test seed {mc_seed}"


@pytest.mark.mc_req("MR-3")
def test_passes():
    pass


@pytest.mark.mc_req("MR-4")
def test_fails_the_first_time():
    marker = pathlib.Path("ran-once")
    first = not marker.exists()
    marker.touch()
    assert not first, "the first run in this directory"
"""

ONLY_FLAKY = """
import pytest


@pytest.mark.mc_req("MR-1")
def test_fails_with_seed_4(mc_config):
    assert mc_config.seed != 4, f"session seed {mc_config.seed}"


@pytest.mark.mc_req("MR-3")
def test_passes():
    pass


@pytest.mark.mc_req("MR-17")
@pytest.mark.mc_skew("metadata-rolling-upgrade")
def test_pair(mc_skew, mc_config):
    assert mc_config.seed != 4, f"session seed {mc_config.seed}"
"""


def _valid(doc: dict) -> dict:
    errors = sorted(VALIDATOR.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    return doc


def _verdicts(requirements: dict) -> dict[str, str]:
    return {req: entry["verdict"] for req, entry in requirements.items()}


def _test_seed(session_seed: int, nodeid: str) -> int:
    """``mc_seed`` of a test (``fixtures/target_session.py``)."""
    return (session_seed + zlib.crc32(nodeid.encode())) % 2**32


def test_fail_reproduced_stays_fail_and_seen_both_ways_is_intermittent(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_flaky=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--mc-seed={SEED}",
                                "--mc-report=r.json", "--junitxml=j.xml",
                                "--alluredir=allure")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # MR-2 FAILs on every seed
    result.stdout.fnmatch_lines([
        "*mooncake: re-running failed tests (--mc-confirm=2)*",
        f"re-run 1 of 2: 3 failed test(s) with --mc-seed={SEED} ...",
        f"re-run 2 of 2: 3 failed test(s) with --mc-seed={NEW_SEED} ...",
    ])
    result.stdout.fnmatch_lines([
        "MR-1 *intermittent 2/3*",
        "MR-2 *FAIL (1/1)*",
        "MR-3 *pass (1)*",
        "MR-4 *intermittent 1/3*",
        "verdicts: 1 pass, 1 FAIL, 2 intermittent",
        f"  intermittent MR-1 [[]reference[]]: failed in 2 of 3 runs (seeds {SEED}, {SEED}), "
        f"passed in 1 (seed {NEW_SEED})",
        f"    replay: python -m pytest -p no:cacheprovider --mc-seed={SEED} --mc-confirm=0 "
        "test_flaky.py::test_fails_with_seed_4",
        f"  intermittent MR-4 [[]reference[]]: failed in 1 of 3 runs (seed {SEED}), passed in 2 "
        f"(seeds {SEED}, {NEW_SEED})",
        f"  FAIL MR-2 [[]reference[]]: failed in 3 of 3 runs (seeds {SEED}, {SEED}, {NEW_SEED})",
    ])
    result.stdout.no_fnmatch_line("*MR-3 [[]reference[]]:*")

    doc = _valid(json.loads((pytester.path / "r.json").read_text()))
    assert doc["schema_version"] == 2
    reqs = doc["requirements"]
    assert _verdicts(reqs) == {"MR-1": "intermittent", "MR-2": "FAIL", "MR-3": "pass",
                               "MR-4": "intermittent"}
    assert doc["summary"]["verdicts"] == {"pass": 1, "FAIL": 1, "intermittent": 2, "n/a": 0,
                                          "error": 0}
    assert reqs["MR-1"]["confirmation"]["ratio"] == "2/3"
    assert [(r["seed"], r["verdict"]) for r in reqs["MR-1"]["confirmation"]["runs"]] == [
        (SEED, "FAIL"), (SEED, "FAIL"), (NEW_SEED, "pass")]
    assert reqs["MR-2"]["confirmation"]["ratio"] == "3/3"
    assert "confirmation" not in reqs["MR-3"] and "runs" not in reqs["MR-3"]["tests"][0]
    runs = reqs["MR-1"]["tests"][0]["runs"]
    assert [(r["seed"], r["outcome"]) for r in runs] == [
        (SEED, "failed"), (SEED, "failed"), (NEW_SEED, "passed")]
    assert runs[1]["message"].startswith(f"AssertionError: session seed {SEED}")
    assert [r["bound"] for r in [doc["reruns"]]] == [2]
    assert [(r["seed"], r["tests"], r["exit_status"]) for r in doc["reruns"]["runs"]] == [
        (SEED, 3, 1), (NEW_SEED, 3, 1)]

    # A new session seed changes the randomness a test draws from: the per-test seed.
    nodeid = "test_flaky.py::test_fails_on_every_seed"
    seen = (pytester.path / "every-seed.txt").read_text().split()
    assert seen == [str(_test_seed(s, nodeid)) for s in (SEED, SEED, NEW_SEED)]
    assert seen[0] == seen[1] != seen[2]

    # Each run's replay command reproduces that run's outcome.
    flaky = {r["outcome"]: r["replay"] for r in runs}
    for outcome, command in flaky.items():
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "pytest"], command
        replayed = pytester.run(sys.executable, *argv[1:], "--mc-report=replay.json")
        again = json.loads((pytester.path / "replay.json").read_text())
        assert [t["outcome"] for t in again["requirements"]["MR-1"]["tests"]] == [outcome], (
            command, replayed.outlines[-20:])

    props = {p.get("name"): p.get("value")
             for p in ET.parse(pytester.path / "j.xml").getroot().find("testsuite")
             .find("properties")}
    assert props["mooncake_verdict[reference][MR-1]"].startswith(
        f"intermittent 2/3: failed in 2 of 3 runs (seeds {SEED}, {SEED}), passed in 1 (seed "
        f"{NEW_SEED}); replay: python -m pytest")
    assert props["mooncake_verdict[reference][MR-2]"].startswith("FAIL 3/3")
    assert "mooncake_verdict[reference][MR-3]" not in props

    marks = {}
    for path in (pytester.path / "allure").glob("*-result.json"):
        result_doc = json.loads(path.read_text())
        labels = {(lb["name"], lb["value"]) for lb in result_doc["labels"]}
        nodeid = next(v for k, v in labels if k == "mc_nodeid")
        marks[nodeid.rpartition("::")[2]] = (
            {v for k, v in labels if k == "tag"},
            result_doc.get("statusDetails", {}).get("flaky", False))
    assert marks["test_fails_with_seed_4"] == ({"intermittent"}, True)
    assert marks["test_fails_the_first_time"] == ({"intermittent"}, True)
    assert marks["test_fails_on_every_seed"] == ({"FAIL reproduced"}, False)
    assert marks["test_passes"] == (set(), False)
    categories = json.loads((pytester.path / "allure" / "categories.json").read_text())
    assert categories[0]["flaky"] is True and categories[0]["name"].startswith("intermittent")


def test_no_reruns_keeps_the_verdicts_of_one_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_flaky=SUITE)
    for args in (("--mc-confirm=0",), ()):
        if not args:
            pytester.makeini("[pytest]\nmc_confirm = 0\n")
        (pytester.path / "ran-once").unlink(missing_ok=True)
        result = pytester.runpytest("-p", "no:cacheprovider", f"--mc-seed={SEED}",
                                    "--mc-report=r.json", *args)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.no_fnmatch_line("*re-run*")
        doc = _valid(json.loads((pytester.path / "r.json").read_text()))
        assert _verdicts(doc["requirements"]) == {"MR-1": "FAIL", "MR-2": "FAIL", "MR-3": "pass",
                                                  "MR-4": "FAIL"}, args
        assert doc["reruns"] == {"bound": 0, "runs": []}
        assert not any("runs" in t or "confirmation" in e for e in doc["requirements"].values()
                       for t in e["tests"])
        assert (pytester.path / "every-seed.txt").read_text().count("\n") == 1
        (pytester.path / "every-seed.txt").unlink()


def test_only_intermittent_failures_exit_0_unless_fail_on_intermittent_under_xdist(
        pytester: pytest.Pytester) -> None:
    """Two workers, a version-skew pair: the re-runs run the failed tests (three, one per
    pair) with two workers of their own, and the pair's cells are intermittent too."""
    pytester.makepyfile(test_flaky=ONLY_FLAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2",
                                           f"--mc-seed={SEED}", "--mc-report=r.json",
                                           timeout=600)
    assert result.ret == pytest.ExitCode.OK, result.outlines[-30:]
    result.stdout.fnmatch_lines(["exit status 0: each of the * failed test(s) passed on a "
                                 "re-run (intermittent); --mc-fail-on=intermittent refuses "
                                 "such a run"])
    doc = _valid(json.loads((pytester.path / "r.json").read_text()))
    assert _verdicts(doc["requirements"]) == {"MR-1": "intermittent", "MR-3": "pass",
                                              "MR-17": "intermittent"}
    assert doc["pairs"] and all(_verdicts(cell["requirements"]) == {"MR-17": "intermittent"}
                                for cell in doc["pairs"].values()), doc["pairs"]
    log = (doc["reruns"]["runs"][0]["log"])
    with open(log) as f:
        assert "-n 2" in f.readline()  # the re-run kept the run's two workers

    result = pytester.runpytest("-p", "no:cacheprovider", f"--mc-seed={SEED}",
                                "--mc-report=r.json", "--mc-fail-on=na+intermittent")
    assert result.ret == EXIT_NOT_JUDGED
    result.stdout.fnmatch_lines([
        "--mc-fail-on=na+intermittent: * problem(s), exit status 6:",
        f"  [[]reference[]] MR-1 intermittent: failed in 2 of 3 runs (seeds {SEED}, {SEED}), "
        f"passed in 1 (seed {NEW_SEED})"])
    assert json.loads((pytester.path / "r.json").read_text())["fail_on"]["rule"] == \
        "na+intermittent"


def test_matrix_columns_are_confirmed_each_on_its_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_columns="""
        import pytest

        @pytest.mark.mc_req("MR-7")
        def test_legacy_fails_with_seed_4(mc_target, mc_config):
            assert not (mc_target.label == "reference:legacy" and mc_config.seed == 4)
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-matrix=reference-profiles",
                                f"--mc-seed={SEED}", "--mc-report=m.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["MR-7 *pass (1)*intermittent 2/3*",
                                 "  intermittent MR-7 [[]reference:legacy[]]: *",
                                 "    replay: python -m pytest -p no:cacheprovider "
                                 "--mc-matrix=reference-profiles "
                                 f"--mc-seed={SEED} --mc-confirm=0 "
                                 "'test_columns.py::test_legacy_fails_with_seed_4[[]"
                                 "reference:legacy[]]'"])
    doc = _valid(json.loads((pytester.path / "m.json").read_text()))
    assert {c: _verdicts(col["requirements"]) for c, col in doc["columns"].items()} == {
        "reference": {"MR-7": "pass"}, "reference:legacy": {"MR-7": "intermittent"}}
    assert doc["summary"]["verdicts"]["intermittent"] == 1


def test_rerun_seeds_start_with_the_runs_own_and_follow_from_it() -> None:
    assert rerun_seeds(SEED, 0) == []
    assert rerun_seeds(SEED, 1) == [SEED]
    seeds = rerun_seeds(SEED, 5)
    assert seeds[0] == SEED and len(set(seeds)) == 5 and seeds == rerun_seeds(SEED, 5)
    assert rerun_seeds(SEED + 1, 5)[1:] != seeds[1:]


def test_a_rerun_names_its_tests_where_pytest_was_started_without_the_runs_paths_and_outputs(
        tmp_path) -> None:
    args = ["-p", "no:cacheprovider", "suites/", "-n", "2", "--mc-seed=7", "--mc-report",
            "r.json", "--junitxml=j.xml", "-nauto", "--mc-matrix=release", "-k", "MR"]
    kept = without_options(without_paths(args, ["suites/"]),
                           ("--mc-seed", "--mc-report", "--junitxml"))
    assert kept == ["-p", "no:cacheprovider", "-n", "2", "-nauto", "--mc-matrix=release",
                    "-k", "MR"]
    command = PytestCommand(tuple(kept), tmp_path, tmp_path / "sub")
    assert command.path_of("suites/a.py::test[x]") == "../suites/a.py::test[x]"
    assert command.replay(9, "suites/a.py::test[x y]") == (
        "python -m pytest -p no:cacheprovider --mc-matrix=release -k MR --mc-seed=9 "
        "--mc-confirm=0 '../suites/a.py::test[x y]'")
    argv = command.rerun_argv(9, ["suites/a.py::t"], {"--mc-report": "/x.json"})
    assert argv[:3] == [sys.executable, "-m", "pytest"]
    assert argv[3:] == [*kept, f"--rootdir={tmp_path}", "--mc-seed=9", "--mc-confirm=0",
                        "--mc-fail-on=never",
                        "--mc-report=/x.json", "../suites/a.py::t"]


@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_bad_bound_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest(f"--mc-confirm={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--mc-confirm must be an integer >= 0 (got '{value}'); 0 "
                                 "turns it off*"])
