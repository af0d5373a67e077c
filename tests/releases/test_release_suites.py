"""The fast part of the conformance suites against the releases CI judges by version
(0.3.13.post1 and 0.3.14), as CI runs it, in an environment that cannot import Mooncake.

One child pytest runs the ``[fast]`` paths of pytest_mooncake/data/verdicts/mooncake.toml over a two-column
matrix (``mooncake==0.3.13.post1``, ``mooncake-cuda13==0.3.14``); each release runs in its own
cached environment (``scripts/setup.sh`` pre-installs both). The child's own ``mooncake`` is a
package that refuses to import, so the run shows the plugin judges a release by version without
any Mooncake wheel of its own. Every test's outcome must be the one the stored release matrix
run (fixtures/reports/releases.json, ``scripts/judge_mooncake.py --releases``) gave the same test
in the same column: a release that no longer starts, or a suite change that moves a verdict
without regenerating that report, fails here.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from release_choice import CI_RELEASES

from pytest_mooncake.report.catalogue import tomllib
from pytest_mooncake.targets import target_identity

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "fixtures" / "reports" / "releases.json"
FAST = tomllib.loads((ROOT / "pytest_mooncake" / "data" / "verdicts" / "mooncake.toml").read_text())["fast"]
RUN_DEADLINE = 600  # both releases take ~1-2 min here; past this the run is taken as hung
NO_WHEEL = ("raise ImportError('this environment has no Mooncake wheel: the plugin must judge "
            "releases by version in their own environments')\n")

pytestmark = pytest.mark.xdist_group("releases")


def _run_suites():
    """run_suites of tests/test_detection_proof.py (one helper for every suite-running test)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_detection_proof_helpers", ROOT / "tests" / "test_detection_proof.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_suites


def columns() -> list[str]:
    return [target_identity(f"mooncake=={v}") for v in CI_RELEASES]


def matrix_paths(paths: list[str]) -> list[str]:
    """The fast paths as a matrix run can select them: a test id's parameters
    (``test_x[etcd]``) are ``[COLUMN-etcd]`` there, so a parametrized id selects the whole
    function (every parameter of it is in the stored run too)."""
    return list(dict.fromkeys(re.sub(r"\[[^\]]*\]$", "", p) for p in paths))


def outcomes(doc: Mapping[str, Any], column: str) -> dict[str, str]:
    """nodeid -> outcome of every test a report gave ``column``."""
    reqs = doc["columns"][column]["requirements"]
    return {t["nodeid"]: t["outcome"] for entry in reqs.values() for t in entry["tests"]}


@pytest.fixture(scope="module")
def fast_run(real_release, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    for version in CI_RELEASES:
        real_release(version)  # installed (or skipped/failed as release_choice says)
    tmp = tmp_path_factory.mktemp("release-fast")
    shadow = tmp / "no-wheel" / "mooncake"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(NO_WHEEL)
    matrix = tmp / "ci-releases.toml"
    matrix.write_text("".join(f'[[column]]\ntarget = "{c}"\n\n' for c in columns()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(shadow.parent))
        return _run_suites()([*matrix_paths(FAST["paths"]), f"--mc-matrix={matrix}", "-rfEs"],
                             tmp / "report.json", RUN_DEADLINE)


def _context(doc: Mapping[str, Any]) -> str:
    return (f"\n\nseed {doc['seed']} (rerun with --mc-seed={doc['seed']}), exit {doc['_exit']}; "
            f"run output:\n{doc['_output']}")


MOVED = ROOT / "fixtures" / "reports" / "moved-since-releases.toml"
"""Differences from the stored run accepted for a recorded reason, until it is regenerated."""


def moved_for_a_recorded_reason(nodeid: str, outcome: str, was: str) -> bool:
    entries = tomllib.loads(MOVED.read_text()).get("moved", []) if MOVED.exists() else []
    return any((nodeid == e["nodeid"] or fnmatch.fnmatchcase(nodeid, e["nodeid"]))
               and e["now"] == outcome
               and e["was"] == was and e.get("why") for e in entries)


def test_fast_outcomes_are_those_of_the_stored_release_matrix(fast_run):
    if not STORED.exists():
        pytest.fail("no stored release matrix run: scripts/judge_mooncake.py --releases writes "
                    f"{STORED.relative_to(ROOT)}", pytrace=False)
    stored = json.loads(STORED.read_text())
    wrong = []
    for column in columns():
        before, now = outcomes(stored, column), outcomes(fast_run, column)
        judged = fast_run["columns"][column]["requirements"]
        wrong += [f"{column}: {r} judged by no fast test" for r in FAST["requirements"]
                  if r not in judged]
        for nodeid, outcome in sorted(now.items()):
            was = before.get(nodeid, "absent from the stored run")
            if was != outcome and not moved_for_a_recorded_reason(nodeid, outcome, was):
                wrong.append(f"{column}: {nodeid}: {outcome}, stored run {was}")
    assert not wrong, ("fast run against the CI releases differs from "
                       f"{STORED.relative_to(ROOT)} (run scripts/judge_mooncake.py --releases "
                       "if a suite changed a verdict):\n  " + "\n  ".join(wrong)
                       + _context(fast_run))


def test_fast_run_judges_each_release_with_reasons_and_no_errors(fast_run):
    """Each release column shows a pass, a FAIL and an n/a; no test errs; every n/a reason names
    the release it was probed on; the plugin's environment imported no Mooncake."""
    problems = []
    for column in columns():
        version = fast_run["columns"][column]["version"]
        reqs = fast_run["columns"][column]["requirements"]
        verdicts = [e["verdict"] for e in reqs.values()]
        if not ("pass" in verdicts and "FAIL" in verdicts and verdicts.count("n/a") >= 1):
            problems.append(f"{column}: verdicts {sorted(verdicts)}")
        for req, entry in reqs.items():
            for t in entry["tests"]:
                if t["outcome"] == "error":
                    problems.append(f"{column}: {req} {t['nodeid']} error: "
                                    f"{t.get('message', '')[:300]}")
                if t["outcome"] == "skipped" and version not in t.get("reason", ""):
                    problems.append(f"{column}: {req} {t['nodeid']} n/a reason "
                                    f"{t.get('reason')!r} does not name {version!r}")
    assert not problems, "\n  ".join(["fast run:", *problems]) + _context(fast_run)
    assert fast_run["_exit"] in (0, 1), "child pytest exit status" + _context(fast_run)
    assert "this environment has no Mooncake wheel" not in fast_run["_output"], _context(fast_run)
