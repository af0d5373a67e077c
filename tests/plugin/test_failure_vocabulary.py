"""Failure messages read against the harness-symptom vocabulary (report/failure_vocabulary.py):
the stored reports hold no harness message beyond the reviewed list, the messages the harness
writes now speak of the build, and ``report failures`` says which is which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from pytest_mooncake.report.__main__ import main
from pytest_mooncake.report.failure_vocabulary import SYMPTOMS, failures, symptom_of
from pytest_mooncake.targets.mooncake.quiescence import NodeView, Watch, describe

ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted((ROOT / "fixtures" / "reports").glob("*.json"))
KNOWN = tomllib.loads((ROOT / "fixtures" / "reports" / "harness-symptoms.toml").read_text())

HARNESS = {  # messages stored reports held, one per symptom (before the fixes)
    "settle-deadline": "AssertionError: a transfer with a flush completion: the cluster did not "
                       "settle\nassert False\n +  where False = settle()",
    "helper-timeout": "pytest_mooncake.runtime.deadlines.Timeout: timed out after 10s waiting "
                      "for B to reach the restarted A; last observed: False",
    "harness-refusal": "ValueError: slice 0 of transfer 0 was never posted: settle() first",
    "unmeasured-deadline": "Failed: schedule 69 of the 'qp_fatal_races_completion' exploration "
                           "broke CO-9: stuck_slice: transfer 68 (write 8192 bytes A->B) never "
                           "ended",
    "bare-assertion": "assert False",
    "test-code-exception": "TypeError: 'NoneType' object is not subscriptable",
}
BUILD = [  # messages of the build's behaviour, from the same reports
    "AssertionError: the slice was posted 2 times with wr_ids ['0x7f74cc0073e0', "
    "'0x7f74cc0073e0']: a retry carried the wr_id of an earlier attempt",
    "Failed: precondition: 20s after 40 acknowledged puts the standby had not applied them: "
    "{'applied_seq': 0, 'primary_seq': 0}",
    "pytest_mooncake.targets.mooncake.driver.control_channel.ControlError: "
    "mooncake-engine-rdma2147c2-A closed the control channel during status: it died with SIGSEGV",
    "MR-5 demands forced_refresh, and the target lacks it: mooncake.engine of "
    "mooncake-transfer-engine-cuda13 0.3.14 offers no forced refresh of one peer",
    "AssertionError: a transfer to B after a device_fatal: the transfer ended FAILED\n"
    "assert 'FAILED' == 'COMPLETED'",
]


@pytest.mark.parametrize("name", sorted(HARNESS))
def test_each_symptom_is_recognised_in_a_message_of_its_kind(name) -> None:
    found = symptom_of(HARNESS[name])
    assert found is not None and found.name == name, (name, found)
    assert found.cause and found.fix


@pytest.mark.parametrize("message", BUILD)
def test_messages_about_the_build_show_no_symptom(message) -> None:
    assert symptom_of(message) is None, symptom_of(message)


def test_every_symptom_has_an_example() -> None:
    assert {s.name for s in SYMPTOMS} == set(HARNESS)


def test_what_settle_raises_now_speaks_of_the_build_and_an_empty_one_does_not() -> None:
    """The NotQuiescent message names transfers, events and motion; one that could name
    nothing is itself a symptom (a deadline with nothing outstanding is ours)."""
    watch = Watch()
    watch.see([NodeView("A", True, posted=3, events=2, acked=2, qps=frozenset({256, 257}))])
    watch.see([NodeView("A", True, posted=9, events=4, acked=3, qps=frozenset({258, 259}),
                        busy=("A: 1 of 4 async event(s) never acknowledged",))])
    message = ("pytest_mooncake.targets.base.NotQuiescent: "
               + describe(30, 0.2, 1.5, ["0 (write 4096 bytes A->B)"], [], watch,
                          {"A": ["worker/7: ibv_destroy_qp <- RdmaEndPoint::deconstruct"]}))
    for seen in ("transfer 0 (write 4096 bytes A->B) had not ended",
                 "1 of 4 async event(s) never acknowledged", "posted 6", "raised events 2",
                 "created 2 and destroyed 2 QP(s)", "ibv_destroy_qp",
                 "never stayed unchanged for 1.5s"):
        assert seen in message, (seen, message)
    assert symptom_of(message) is None
    empty = describe(30, 5.0, 1.5, [], [], Watch(), {})
    assert symptom_of(empty).name == "settle-deadline", empty


def _stored_harness() -> set[tuple[str, str, str, str]]:
    found = set()
    for path in REPORTS:
        for f in failures(json.loads(path.read_text())):
            if f.symptom:
                found.add((path.name, f.column, f.requirement, f.symptom.name))
    return found


def test_stored_reports_hold_no_harness_message_beyond_the_reviewed_list() -> None:
    """A harness message in a stored report must be listed with its cause and fix
    (fixtures/reports/harness-symptoms.toml); an entry no report shows any more must go."""
    known = {(k["report"], k["column"], k["requirement"], k["symptom"]) for k in KNOWN["known"]}
    stored = _stored_harness()
    assert not stored - known, (
        f"stored failure messages that show a harness symptom and are not reviewed: "
        f"{sorted(stored - known)}; fix the cause (docs/verdict-stability.md) and regenerate")
    assert not known - stored, (
        f"reviewed harness messages no stored report shows any more: {sorted(known - stored)}; "
        f"remove them from fixtures/reports/harness-symptoms.toml")
    assert all(k["cause"] and k["fix"] for k in KNOWN["known"])


def _report(tmp_path: Path, name: str, message: str) -> Path:
    doc = {"schema_version": 2, "started": "2026-12-02T00:00:00+00:00", "duration_s": 1.0,
           "seed": 5, "target": "t", "target_version": "t 1",
           "requirements": {"CO-3": {"verdict": "FAIL", "tests": [
               {"nodeid": "suites/rdma/x.py::test_x", "outcome": "failed", "duration_s": 1.0,
                "message": message}]}}}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_failures_command_marks_harness_messages_and_exits_1(tmp_path, capsys) -> None:
    ours = _report(tmp_path, "ours.json", HARNESS["settle-deadline"])
    theirs = _report(tmp_path, "theirs.json", BUILD[0])
    assert main(["failures", str(theirs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("build ") and "0 showing a harness symptom" in out
    assert main(["failures", str(ours), str(theirs), "--harness"]) == 1
    out = capsys.readouterr().out
    assert "settle-deadline      ours.json [t] CO-3 x1: AssertionError: a transfer with a " \
           "flush completion" in out
    assert "theirs.json" not in out.split("\n\n")[0]
    assert "settle-deadline: a settle loop of ours" in out


def test_a_fresh_run_failing_with_a_harness_message_is_caught(pytester, capsys) -> None:
    """A run whose test fails the way the settle loop used to: its own report, read by the
    command, shows the symptom (what CI runs over fresh reports)."""
    pytester.makepyfile(test_fresh="""
        import pytest

        @pytest.mark.mc_req("CO-3")
        def test_waits_on_a_cluster():
            settled = False
            assert settled, "a transfer with a flush completion: the cluster did not settle"
        """)
    report = pytester.path / "fresh.json"
    pytester.runpytest("-p", "no:cacheprovider", "--mc-confirm=0", f"--mc-report={report}")
    capsys.readouterr()
    assert main(["failures", str(report), "--harness"]) == 1
    assert "settle-deadline" in capsys.readouterr().out


def test_the_proof_runs_since_the_fixes_show_no_harness_symptom() -> None:
    """The three-seed runs of docs/verdict-stability.md (fixtures/reports/stability/), made
    with the fixes: every failure message speaks of the build."""
    paths = sorted((ROOT / "fixtures" / "reports" / "stability").glob("*.json"))
    assert len(paths) >= 9, paths
    shown = [(p.name, f.requirement, f.symptom.name, f.first_line)
             for p in paths for f in failures(json.loads(p.read_text())) if f.symptom]
    assert not shown, shown
