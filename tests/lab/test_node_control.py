"""Node control over SSH on the lab: a reference engine started, killed, paused, resumed and read
on its node, with deadlines and errors that name the node, the command and what it said."""

from __future__ import annotations

import threading

import pytest

from pytest_mooncake.nodes import (
    CommandFailed,
    CommandTimeout,
    ComponentError,
    FaultNotAllowed,
    Fleet,
    NodeUnreachable,
)
from pytest_mooncake.schemas.cluster_manifest import load_manifest


def test_kill_and_start_an_engine(mc_lab_fleet, engines):
    node = mc_lab_fleet.node_of("engine-seg-c")
    before = node.pids("engine-seg-c")
    assert before and node.state("engine-seg-c") == "running"
    killed = node.kill("engine-seg-c")
    assert killed == before
    assert node.state("engine-seg-c") == "absent" and node.pids("engine-seg-c") == []
    # nothing to kill or pause now: no fault is recorded for it
    assert node.kill("engine-seg-c") == []
    with pytest.raises(ComponentError, match="cannot pause engine-seg-c: it is not running"):
        node.pause("engine-seg-c")
    outstanding = mc_lab_fleet.ledger.outstanding(mc_lab_fleet.run)
    assert [(e.fault["kind"], e.fault["component"]) for e in outstanding] == [("down", "engine-seg-c")]
    with pytest.raises(ConnectionError):
        engines["n3"].call("info")
    after = node.start("engine-seg-c")
    assert after and after != before
    assert engines["n3"].call("info")["pid"] == after[0]
    assert mc_lab_fleet.ledger.outstanding(mc_lab_fleet.run) == []


def test_start_refuses_a_running_component(mc_lab_fleet):
    node = mc_lab_fleet.node("n3")
    with pytest.raises(ComponentError, match=r"node n3: engine-seg-c is already running: \d+"):
        node.start("engine-seg-c")


def test_pause_holds_requests_until_resume(mc_lab_fleet, engines):
    node = mc_lab_fleet.node("n3")
    pids = node.pause("engine-seg-c")
    assert node.state("engine-seg-c") == "paused"
    got: dict[str, object] = {}
    asker = threading.Thread(target=lambda: got.update(info=engines["n3"].call("info")))
    asker.start()
    asker.join(0.5)
    assert "info" not in got, "a SIGSTOPped engine answered"
    assert node.resume("engine-seg-c") == pids
    asker.join(30)
    assert got["info"]["pid"] == pids[0]
    assert node.state("engine-seg-c") == "running"


def test_stop_is_sigterm_and_a_teardown_restarts_what_a_test_left_down(mc_lab_fleet, engines):
    node = mc_lab_fleet.node("n3")
    assert node.stop("engine-seg-c") == "term"
    assert "stopping segment seg-c" in node.logs("engine-seg-c", 5)
    # what the fixture does after each test: heal this run's faults (start it again)
    outcomes = mc_lab_fleet.heal()
    assert [(o.ok, o.entry.fault["component"]) for o in outcomes] == [(True, "engine-seg-c")]
    assert engines["n3"].call("info")["segment"] == "seg-c"


def test_logs_of_a_component(mc_lab_fleet):
    node = mc_lab_fleet.node("n1")
    # the whole log (etcd's grows with warnings under load, so a short tail may miss it)
    assert "ready to serve client requests" in node.logs("etcd-n1", 1_000_000)
    assert len(node.logs("etcd-n1", 2).splitlines()) == 2


def test_errors_name_node_command_and_what_the_node_said(mc_lab_fleet):
    node = mc_lab_fleet.node("n2")
    with pytest.raises(CommandFailed) as failed:
        node.run("echo to-stdout; echo went-wrong >&2; exit 3")
    text = str(failed.value)
    assert text.startswith("node n2: `echo to-stdout;")
    assert "exited 3" in text and "went-wrong" in text and "to-stdout" in text
    with pytest.raises(CommandTimeout, match=r"node n2: `echo started; sleep 60` did not finish "
                                             r"within 3s; remote said stdout: started"):
        node.run("echo started; sleep 60", timeout=3)
    with pytest.raises(ComponentError, match="node n2: has no component 'engine-n9'"):
        node.kill("engine-n9")


def test_unreachable_node(mc_lab):
    spec = mc_lab.fleet.spec
    bad = spec.model_copy(update={"nodes": tuple(
        n.model_copy(update={"port": 2222, "connect_timeout": 3.0}) for n in spec.nodes)})
    with Fleet(bad, run="unreachable") as fleet:
        with pytest.raises(NodeUnreachable, match=r"node n1: cannot connect to "
                                                   r"root@198\.18\.\d+\.2:2222: ConnectionRefusedError"):
            fleet.node("n1").run("true")


def test_operator_opt_in(mc_lab, tmp_path):
    text = mc_lab.cluster_file.read_text()
    start = text.index("[faults]")
    end = text.index("\n\n", start)
    restricted = tmp_path / "observe-only.toml"
    restricted.write_text(text[:start] + '[faults]\nallow = ["observe", "logs", "kill:master"]'
                          + text[end:])
    with Fleet(load_manifest(restricted), run="opt-in") as fleet:
        node = fleet.node("n3")
        with pytest.raises(FaultNotAllowed, match=r"does not permit 'kill' or kill:engine, so "
                                                  r"this run may not kill -9 engine-seg-c on n3"):
            node.kill("engine-seg-c")
        with pytest.raises(FaultNotAllowed, match="'pause'"):
            node.pause("engine-seg-c")
        with pytest.raises(FaultNotAllowed, match="'partition'"):
            fleet.faults.partition("n3", ["n2"])
        assert node.state("engine-seg-c") == "running"
        assert "event" in node.logs("engine-seg-c", 5)
        assert fleet.ledger.outstanding("opt-in") == []


def test_a_unit_component_on_a_node_without_systemd_says_so(mc_lab):
    spec = mc_lab.fleet.spec
    unit = spec.component("engine-seg-c").model_copy(update={
        "name": "unit-n3", "start": None, "unit": "mooncake-engine.service", "env": {},
        "cwd": None, "match": None})
    with Fleet(spec.model_copy(update={"components": spec.components + (unit,)}),
               run="unit") as fleet:
        # systemctl is missing, or present without systemd running: either way the node says so
        with pytest.raises(CommandFailed, match=r"node n3: `start unit-n3` exited [1-9]\d*; "
                                                r"remote said stderr: .*(systemd|systemctl)"):
            fleet.node("n3").start("unit-n3")
