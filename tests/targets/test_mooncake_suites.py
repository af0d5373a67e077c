"""The fast part of the conformance suites against the real Mooncake wheel, as CI runs it.

A child pytest runs the ``[fast]`` paths of pytest_mooncake/data/verdicts/mooncake.toml with
``--mc-target=mooncake`` (real TransferEngine driver processes, real ``mooncake_master`` HA
masters and ``mooncake.store`` clients on a real etcd) and writes ``--mc-report``; its verdicts
are checked against the shipped expectations file of 0.3.13
(pytest_mooncake/data/expectations/mooncake-0.3.13.post1@ha-oplog.toml, what ``--mc-expect``
reads), which is itself checked against the full run stored in fixtures/reports/release-profiles.json (and the later runs laid over it). Without a usable wheel this is n/a, except under ``CI=true``:
CI installs the wheel (scripts/setup.sh: ``pip install -e ".[dev,mooncake]"``), so there its
absence is a failure, not a skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.report.catalogue import load_catalogue, tomllib
from pytest_mooncake.report.expectations import load_expectations
from pytest_mooncake.targets import resolve_target

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_mooncake_suites")

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ROOT / "pytest_mooncake" / "data" / "verdicts" / "mooncake.toml"
RELEASE_REPORT = ROOT / "fixtures" / "reports" / "release-profiles.json"
EXPECTED = tomllib.loads(VERDICTS.read_text())
TABLE = EXPECTED["mooncake"]
EXPECTATIONS_NAME = "mooncake-0.3.13.post1@ha-oplog"
EXPECTATIONS = load_expectations(EXPECTATIONS_NAME).single
FAST_PATHS = EXPECTED["fast"]["paths"]
FAST_REQUIREMENTS = EXPECTED["fast"]["requirements"]
FAMILIES = ("MR", "CO", "MP")
RUN_DEADLINE = 600  # the subset takes ~90 s here (more under load); past this it is taken as hung


def _load_detection_helpers():
    """run_suites / verdict_mismatches of tests/test_detection_proof.py (one helper for both
    suite-running tests), loaded under its own name so pytest's import of that test module is
    left alone."""
    spec = importlib.util.spec_from_file_location(
        "_detection_proof_helpers", ROOT / "tests" / "test_detection_proof.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_helpers = _load_detection_helpers()
run_suites, verdict_mismatches = _helpers.run_suites, _helpers.verdict_mismatches


def expected_verdict(req: str) -> str:
    """The one verdict the shipped expectations file gives ``req`` (it lists every requirement
    of the stored run, each with a single verdict)."""
    (verdict,) = EXPECTATIONS.of(req).verdicts
    return verdict


def require_wheel(reason: str | None, environ: Mapping[str, str]) -> None:
    """Nothing when the wheel is usable; otherwise skip as n/a, or fail under CI=true."""
    if reason is None:
        return
    if environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true but the Mooncake wheel is not usable ({reason}); CI is meant to "
                    f"install it (scripts/setup.sh installs the [mooncake] extra, "
                    f"mooncake-transfer-engine-non-cuda, and as root the RDMA/NUMA libraries), "
                    f"so the external suites would silently not run", pytrace=False)
    pytest.skip(f"n/a: {reason}")


def names_a_means(reason: str) -> bool:
    return any(means in reason for means in TABLE["na_means"])


def column_problems(requirements: Mapping[str, Any], version: str) -> list[str]:
    """What is wrong with a mooncake column beyond its verdicts: errored tests, n/a without a
    reason naming the missing means and the build, failures without a message."""
    problems = []
    for req, entry in requirements.items():
        if entry["verdict"] == "error":
            problems.append(f"{req}: verdict error")
        for t in entry["tests"]:
            where = f"{req} {t['nodeid']}"
            if t["outcome"] not in ("passed", "failed", "skipped"):
                problems.append(f"{where}: outcome {t['outcome']} ({t.get('message', '')[:300]})")
            if t["outcome"] == "skipped":
                reason = t.get("reason", "")
                if not names_a_means(reason) or version not in reason:
                    problems.append(f"{where}: n/a reason {reason!r} names none of the missing "
                                    f"means of pytest_mooncake/data/verdicts/mooncake.toml or not {version!r}")
            if t["outcome"] == "failed" and not t.get("message"):
                problems.append(f"{where}: failed without a message saying what the build did")
    return problems


# ---------------------------------------------------------------- without a run


def test_wheel_gate_skips_locally_and_fails_under_ci():
    require_wheel(None, {"CI": "true"})
    with pytest.raises(pytest.skip.Exception, match="n/a: Mooncake is not installed"):
        require_wheel("Mooncake is not installed", {})
    with pytest.raises(pytest.fail.Exception, match="CI=true but the Mooncake wheel is not usable"):
        require_wheel("Mooncake is not installed", {"CI": "true"})


def _rejudged_later(name: str, after: str) -> set[str]:
    """Requirements a stored run started after ``after`` judged again for expectations file
    ``name`` (scripts/generate_expectations.py lays those runs over the matrix run)."""
    spec = importlib.util.spec_from_file_location(
        "_generate_expectations", ROOT / "scripts" / "generate_expectations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return {req for file, column, run in module.later_columns()
            if file == name and json.loads((ROOT / run).read_text()).get("started", "") > after
            for req, entry in column.requirements.items() if entry.get("verdict")}


def test_expected_verdicts_are_those_of_the_stored_release_run():
    """The shipped expectations of 0.3.13 are the stored full run's mooncake column, requirement
    by requirement (except those a later stored run judged again), and the n/a means of pytest_mooncake/data/verdicts/mooncake.toml cover every
    n/a reason of that run."""
    doc = json.loads(RELEASE_REPORT.read_text())
    column = doc["columns"]["mooncake"]["requirements"]
    rejudged = _rejudged_later(EXPECTATIONS_NAME, doc["started"])  # taken from later runs
    reqs = [r for r in load_catalogue().requirements
            if r.split("-")[0] in FAMILIES and r not in rejudged]
    assert len(reqs) >= 15, f"only {len(reqs)} requirements left to compare: {sorted(rejudged)}"
    wrong = verdict_mismatches(column, expected_verdict, reqs)
    assert not wrong, (f"{EXPECTATIONS.path} disagrees with the mooncake column of "
                       "fixtures/reports/release-profiles.json:\n  " + "\n  ".join(wrong))
    version = doc["columns"]["mooncake"]["version"]
    problems = column_problems(column, version)
    assert not problems, "stored release run:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def fast_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    target = resolve_target("mooncake")
    require_wheel(target.missing("engine"), os.environ)
    out = tmp_path_factory.mktemp("mooncake-fast") / "mooncake.json"
    doc = run_suites([*FAST_PATHS, "--mc-target=mooncake", "-rfEs"], out, RUN_DEADLINE)
    doc["_version"] = target.version
    return doc


def _context(doc: Mapping[str, Any]) -> str:
    return (f"\n\nseed {doc['seed']} (rerun with --mc-seed={doc['seed']}), exit {doc['_exit']}; "
            f"run output:\n{doc['_output']}")


def test_fast_suites_give_the_expected_verdicts(fast_report):
    observed = fast_report["requirements"]
    assert fast_report["target"] == "mooncake"
    judged = [*FAST_REQUIREMENTS, *(r for r in observed if r not in FAST_REQUIREMENTS)]
    wrong = verdict_mismatches(observed, expected_verdict, judged)
    assert not wrong, (f"{len(wrong)} verdict(s) of the fast suites against {fast_report['_version']} "
                       f"differ from {EXPECTATIONS_NAME}:\n  " + "\n  ".join(wrong)
                       + _context(fast_report))


def test_fast_suites_judge_pass_fail_and_na(fast_report):
    """The subset is worth running: it shows the build meeting a requirement, failing one, and
    lacking the means for one (CO-11: it shows none of its RDMA transport's state), so a wheel
    that no longer starts cannot pass it."""
    verdicts = [e["verdict"] for e in fast_report["requirements"].values()]
    counts = {v: verdicts.count(v) for v in ("pass", "FAIL", "n/a")}
    assert counts["pass"] >= 1 and counts["FAIL"] >= 1 and counts["n/a"] >= 1, (
        f"fast subset verdicts {counts}" + _context(fast_report))


def test_fast_suites_neither_error_nor_skip_without_a_reason(fast_report):
    problems = column_problems(fast_report["requirements"], fast_report["_version"])
    assert not problems, "\n  ".join(["fast suites:", *problems]) + _context(fast_report)
    # FAIL verdicts mean failed tests (exit 1); any other exit is an internal or usage error.
    want = 1 if any(expected_verdict(r) == "FAIL" for r in fast_report["requirements"]) else 0
    assert fast_report["_exit"] == want, "child pytest exit status" + _context(fast_report)
