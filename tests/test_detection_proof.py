"""Proof of detection: the conformance suites pass on the reference engine's ``rfc`` profile and
FAIL, requirement by requirement, on its ``legacy`` profile wherever the RFCs say Mooncake 0.3.13
lacks the property. The expected verdicts are data: fixtures/verdicts/reference.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mooncake.catalogue import load_catalogue, tomllib

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = tomllib.loads((ROOT / "fixtures" / "verdicts" / "reference.toml").read_text())
FAMILIES = ("MR", "CO", "MP")
RUN_DEADLINE = 1200


def expected_verdict(profile: str, req: str) -> str:
    table = EXPECTED[profile]
    return table.get(req, table["default"])


@pytest.fixture(scope="module")
def matrix_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("detection") / "matrix.json"
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "suites/", "-n", "2",
           "-p", "no:cacheprovider", "-q", "--mc-matrix=reference-profiles", f"--mc-report={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_DEADLINE)
    if not out.exists():
        pytest.fail(f"the suite run wrote no report (exit {proc.returncode}):\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}", pytrace=False)
    doc = json.loads(out.read_text())
    doc["_output"] = proc.stdout[-6000:]
    return doc


@pytest.mark.parametrize(("profile", "column"), [("rfc", "reference"), ("legacy", "reference:legacy")])
def test_verdicts_match_the_expected_ones(matrix_report: dict, profile: str, column: str) -> None:
    catalogue = load_catalogue()
    observed = matrix_report["columns"][column]["requirements"]
    wrong = []
    for req in catalogue.requirements:
        if req.split("-")[0] not in FAMILIES:
            continue
        want = expected_verdict(profile, req)
        got = observed.get(req, {}).get("verdict", "untested")
        if got != want:
            tests = ", ".join(f"{t['nodeid']} {t['outcome']}" for t in observed.get(req, {}).get("tests", []))
            wrong.append(f"{req}: expected {want}, observed {got} [{tests}]")
    assert not wrong, (f"{column}: {len(wrong)} requirement verdict(s) differ from "
                       f"fixtures/verdicts/reference.toml:\n  " + "\n  ".join(wrong)
                       + "\n\nrun output:\n" + matrix_report["_output"])


def test_nothing_is_skipped_on_the_reference_target(matrix_report: dict) -> None:
    skipped = [t["nodeid"] + ": " + t.get("reason", "")
               for req in matrix_report["columns"]["reference"]["requirements"].values()
               for t in req["tests"] if t["outcome"] != "passed"]
    assert not skipped, "tests not passing on the rfc reference target:\n  " + "\n  ".join(skipped)


def test_the_nemesis_run_catches_legacy(matrix_report: dict) -> None:
    """Every fixture together (engines, metadata proxy, nemesis, history, checkers): the chaos
    test of MR-16 passes on rfc and its checker reports a violation on legacy."""
    def outcome(column: str) -> str:
        tests = matrix_report["columns"][column]["requirements"]["MR-16"]["tests"]
        return next(t["outcome"] for t in tests if "test_chaos.py" in t["nodeid"])

    assert outcome("reference") == "passed"
    assert outcome("reference:legacy") == "failed"
