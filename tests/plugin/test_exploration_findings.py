"""The release-matrix page's RDMA-explorations region is rendered from a stored report alone
(pytest_mooncake/report/exploration_findings.py, scripts/judge_rdma_explorations.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_mooncake.report.exploration_findings import END, MARKERS, START, findings, render

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "mcs1.eyJhIjoxfQ"
OLD = "mooncake==0.3.13.post1"
NEW = "mooncake-cuda13==0.3.14"
NODE = "suites/rdma/test_completion_ownership.py::test_invariants_hold_under_every_explored_" \
       "interleaving"
REPORT = {
    "seed": 11,
    "columns": {
        OLD: {"requirements": {
            "CO-9": {"verdict": "FAIL", "confirmation": {"ratio": "3/3"}, "tests": [
                {"nodeid": f"{NODE}[reclaim_with_pending_completions-{OLD}]",
                 "outcome": "failed",
                 "message": "Failed: schedule 10 of the 'reclaim_with_pending_completions' "
                            f"exploration broke CO-9: stuck: never ended. Replay with "
                            f"--mc-replay={TOKEN} (or --mc-replay={TOKEN})\nschedule token: x",
                 "runs": [{"seed": 11, "outcome": "failed",
                           "replay": f"python -m pytest --mc-seed=11 '{NODE}[x-{OLD}]'"}]},
                {"nodeid": f"{NODE}[{OLD}-partial_post_bad_wr]", "outcome": "passed"}]},
            "CO-10": {"verdict": "pass", "tests": [
                {"nodeid": f"suites/rdma/t.py::test_handoff[{OLD}]", "outcome": "passed"},
                {"nodeid": f"suites/rdma/t.py::test_poller[{OLD}]", "outcome": "skipped",
                 "reason": "0.3.13.post1 does not read MC_RDMA_DEDICATED_POLLER"}]},
        }},
        NEW: {"requirements": {
            "CO-9": {"verdict": "pass", "tests": [
                {"nodeid": f"{NODE}[reclaim_with_pending_completions-{NEW}]",
                 "outcome": "passed"}]},
        }},
    },
    "explorations": {
        f"test_invariants_hold_under_every_explored_interleaving[{OLD}-partial_post_bad_wr]":
            "partial_post_bad_wr: 40 schedule(s) at the verbs boundary (34 distinct) in 5.4 s, "
            "no violation",
    },
    "judged": {"date": "2026-12-02 15:00 UTC", "wall_seconds": 600, "command": "python -m x"},
}


def test_the_region_has_verdicts_schedules_findings_with_replays_and_na_reasons():
    text = render(REPORT, "fixtures/reports/r.json")
    assert "| CO-9 | **FAIL** (1/2) | pass (1) |" in text
    assert "| CO-10 | pass (1) +1 n/a | - |" in text
    assert "0.3.13.post1 `test_invariants_hold_under_every_explored_interleaving`: " \
           "partial_post_bad_wr: 40 schedule(s)" in text
    assert f"python -m pytest --mc-seed=11 '{NODE}[x-{OLD}]'" in text
    assert f"--mc-replay={TOKEN}" in text
    assert "`test_invariants_hold_under_every_explored_interleaving[reclaim_with_pending_" \
           "completions]` FAIL (3/3 runs)" in text
    assert "- CO-10: 0.3.13.post1 does not read MC_RDMA_DEDICATED_POLLER" in text
    assert text.index("| CO-9 |") < text.index("| CO-10 |")  # CO order, not string order


def test_a_token_the_report_message_lost_comes_from_the_stored_tokens():
    """The JSON report keeps the start of a message; the script keeps JUnit's whole tokens."""
    doc = json.loads(json.dumps(REPORT))
    test = doc["columns"][OLD]["requirements"]["CO-9"]["tests"][0]
    test["message"] = test["message"].split("Replay")[0]
    doc["replay_tokens"] = {test["nodeid"].rpartition("::")[2]: "mcs1.stored"}
    (found,) = findings(doc)
    assert found["token"] == "mcs1.stored"


def test_a_finding_names_its_token_and_the_failed_run_replay():
    (found,) = findings(REPORT)
    assert (found["requirement"], found["token"]) == ("CO-9", TOKEN)
    assert found["what"].startswith("schedule 10 of the 'reclaim_with_pending_completions'")
    assert TOKEN not in found["what"]


def test_only_the_region_changes_it_is_appended_once_and_rendering_is_idempotent():
    page = "# Release matrix\n\nabove\n"
    once = MARKERS.replace(page, "one\n")
    assert once.startswith(page.rstrip("\n")) and once.endswith(f"{START}\none\n{END}\n")
    twice = MARKERS.replace(once, "two\n")
    assert twice == once.replace("one\n", "two\n")
    assert MARKERS.replace(twice, "two\n") == twice
    with pytest.raises(ValueError, match="one line"):
        MARKERS.replace(twice + f"{START}\n", "x\n")


def _script():
    spec = importlib.util.spec_from_file_location(
        "judge_rdma_explorations", ROOT / "scripts" / "judge_rdma_explorations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_run_renders_the_stored_report_and_check_then_passes(tmp_path, capsys):
    script = _script()
    report, page = tmp_path / "r.json", tmp_path / "page.md"
    report.write_text(json.dumps(REPORT))
    page.write_text("# Release matrix\n")
    assert script.main(["--report", str(report), "--page", str(page), "--check"]) == 1
    assert script.main(["--report", str(report), "--page", str(page), "--no-run"]) == 0
    assert f"--mc-replay={TOKEN}" in page.read_text()
    assert script.main(["--report", str(report), "--page", str(page), "--check"]) == 0
    assert script.main(["--report", str(tmp_path / "none.json"), "--page", str(page),
                        "--no-run"]) == 2
    assert "no report at" in capsys.readouterr().err


def test_the_committed_page_matches_the_committed_report():
    assert _script().main(["--check"]) == 0
