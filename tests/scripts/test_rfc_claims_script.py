"""scripts/rfc_claims.py: the RFC-claims page is generated from the stored reports, --check
catches a stale page, every claim names tests that exist, and a claim's cell follows the
test's outcome and message per column and profile."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rfc_claims", ROOT / "scripts" / "rfc_claims.py")
rfc_claims = importlib.util.module_from_spec(spec)
sys.modules["rfc_claims"] = rfc_claims
spec.loader.exec_module(rfc_claims)


def test_the_stored_page_is_what_the_reports_give():
    assert rfc_claims.main(["--check"]) == 0, "run python scripts/rfc_claims.py"


def test_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "rfc-claims.md"
    stale.write_text("an old page\n")
    monkeypatch.setattr(rfc_claims, "PAGE", stale)
    monkeypatch.setattr(rfc_claims, "ROOT", tmp_path.parent)
    monkeypatch.setattr(rfc_claims, "build_page", lambda: "the new page\n")
    assert rfc_claims.main(["--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def _defined(nodeid: str) -> bool:
    path, _, name = nodeid.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name.partition("[")[0]
               for n in ast.walk(tree))


@pytest.mark.parametrize("claim", rfc_claims.load_claims()["claim"], ids=lambda c: c["id"])
def test_every_claim_names_tests_that_exist(claim):
    for nodeid in claim["tests"]:
        assert _defined(nodeid), f"{claim['id']}: no test {nodeid}"
    assert claim["rfc"] in ("MP-master-promotion-safety.md",
                            "MR-metadata-across-node-replacement.md",
                            "CO-rdma-completion-ownership.md")


def _column(profile: str, line: str, outcome: str, message: str = "") -> dict:
    test = {"nodeid": "suites/master/test_promotion.py::test_fresh[column]",
            "outcome": outcome, "duration_s": 1.0}
    if message:
        test["message"] = message
    return {"deployment": {"build": "mooncake==9.9", "profile": {"name": profile,
                                                                   "in_one_line": line or profile}},
            "requirements": {"MP-4": {"verdict": "pass" if outcome == "passed" else "FAIL",
                                      "tests": [test]}}}


CLAIMS = {"reports": [], "claim": [{
    "id": "fresh", "rfc": "MP-x.md", "claim": "a fresh standby serves nothing",
    "tests": ["suites/master/test_promotion.py::test_fresh"],
    "seen": "(?<![0-9])0 of [0-9]+ objects"}]}


def test_a_claim_agrees_under_one_profile_and_not_the_other():
    report = {"columns": {
        "mooncake==0.3.13": _column("ha-oplog", "--enable_oplog=true", "passed"),
        "mooncake==0.3.13@defaults": _column("defaults", "", "failed",
                                              "AssertionError: 0 of 40 objects after failover")}}
    columns, cells = rfc_claims.judge(CLAIMS, [report])
    assert {c.label: cells["fresh"][c.label][0] for c in columns} == {
        "mooncake==0.3.13": "does not reproduce", "mooncake==0.3.13@defaults": "reproduces"}
    assert rfc_claims.agreement(CLAIMS["claim"][0], columns, cells["fresh"]) == (
        "agrees with defaults; does not reproduce with ha-oplog (--enable_oplog=true)")
    page = rfc_claims.render(CLAIMS, [report], ["r.json"])
    assert "| fresh | MP | agrees with defaults; does not reproduce" in page
    assert "0.3.13 with defaults: reproduces: 0 of 40 objects after failover" in page


def test_a_failure_for_another_reason_is_not_a_reproduction():
    report = {"columns": {"mooncake==0.3.13": _column(
        "ha-oplog", "--enable_oplog=true", "failed", "AssertionError: 10 of 40 objects")}}
    _, cells = rfc_claims.judge(CLAIMS, [report])
    assert cells["fresh"]["mooncake==0.3.13"][0] == "fails otherwise"


def test_an_engine_claim_judged_in_both_profiles_names_its_flags_once():
    """A claim no master takes part in reads "engines as the suites start them" in every
    profile's column; the agreement says so once, not once per profile."""
    engine = {**CLAIMS["claim"][0], "scope": "engine"}
    report = {"columns": {
        label: _column(profile, "", "failed", "AssertionError: 0 of 40 objects")
        for label, profile in (("mooncake==0.3.13", "ha-oplog"),
                               ("mooncake==0.3.13@defaults", "defaults"))}}
    columns, cells = rfc_claims.judge({"reports": [], "claim": [engine]}, [report])
    assert rfc_claims.agreement(engine, columns, cells["fresh"]) == (
        "agrees with engines as the suites start them (no master involved)")
