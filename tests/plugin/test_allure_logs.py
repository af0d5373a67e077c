"""A failing test's process logs are attached to its allure result (FW-6), not only printed."""

from __future__ import annotations

import json

import pytest

SUITE = """
import pytest

@pytest.mark.mc_req("MR-16")
def test_uses_etcd_and_fails(mc_etcd):
    mc_etcd.client().put("k", "v")
    assert False, "boom"

@pytest.mark.mc_req("MR-16")
def test_uses_etcd_and_passes(mc_etcd):
    pass
"""


def _results(directory) -> dict[str, dict]:
    docs = [json.loads(p.read_text()) for p in directory.glob("*-result.json")]
    return {d["name"]: d for d in docs}


def test_failing_test_has_the_etcd_log_attached(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("--alluredir=allure", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    allure_dir = pytester.path / "allure"
    results = _results(allure_dir)
    failed = results["test_uses_etcd_and_fails"]
    attachments = [a for a in failed.get("attachments", []) if a["name"] == "etcd log"]
    assert attachments, f"no etcd log among {[a['name'] for a in failed.get('attachments', [])]}"
    text = (allure_dir / attachments[0]["source"]).read_text()
    assert "--- start #1:" in text and "etcd --name mc-etcd-" in text, text[:500]
    passed = results["test_uses_etcd_and_passes"]
    assert not [a for a in passed.get("attachments", []) if a["name"] == "etcd log"], (
        "a passing test got the etcd log attached")
