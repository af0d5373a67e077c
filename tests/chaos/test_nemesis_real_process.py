"""The nemesis against a real process: a loopback key-value server killed with SIGKILL and
restarted on a seeded schedule while workers put/get/remove. The checkers pass on the durable
server and report lost acknowledged writes on the lossy one."""

from __future__ import annotations

import itertools

import pytest
from kv_client import KvClient, start_server

from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import (
    bounded_recovery,
    no_lost_acks,
    no_phantom_reads,
    no_stale_reads,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.history import NEMESIS
from pytest_mooncake.chaos.nemesis import Nemesis, process_kill
from pytest_mooncake.runtime.processes import live_processes

KEYS = 24
SECONDS = 2.5


def _run(mc_chaos, mc_processes, tmp_path, mode: str):
    port, server = start_server(mc_processes, tmp_path, mode)
    workload = gen.kv(keys=KEYS, put=4, get=4, remove=1).stagger(0.004)
    result = mc_chaos.run(lambda w: KvClient(port), workload, [process_kill(server, "kv")],
                          seconds=SECONDS, workers=3, final=gen.final_reads(KEYS),
                          quiet=(0.2, 0.5), hold=(0.05, 0.2),
                          recovery=1.0)  # so bounded_recovery has the last heal to judge too
    kills = [op for op in result.history.ops
             if op.process == NEMESIS and op.f == "inject" and op.type == "info"]
    assert kills, "the nemesis injected no fault"
    assert server.alive(), "the nemesis must leave the server running (healed)"
    return result, server


def test_durable_server_passes_every_checker(mc_chaos, mc_processes, tmp_path) -> None:
    result, server = _run(mc_chaos, mc_processes, tmp_path, "durable")
    counts = result.counts
    assert counts["ok"] > 100 and counts["fail"] + counts["info"] > 0, result.summary()
    verdict = result.check(no_lost_acks, no_stale_reads, no_phantom_reads,
                           bounded_recovery(10.0))
    # transfers_reach_new_instance judges transfers (write/read), not this key-value history:
    # over it, it says "unknown" (nothing to judge)
    assert transfers_reach_new_instance(result.history).valid is None
    verdict.assert_valid()
    restarts = [op for op in result.history.ops if op.f == "heal" and op.instance]
    assert restarts[-1].instance == f"pid-{server.pid}"


def test_lossy_server_loses_acknowledged_writes(mc_chaos, mc_processes, tmp_path) -> None:
    result, _ = _run(mc_chaos, mc_processes, tmp_path, "lossy")
    verdict = result.check(no_lost_acks, no_stale_reads, no_phantom_reads)
    assert verdict["no-phantom-reads"].valid is True, verdict.explanation
    assert verdict.valid is False, verdict.explanation
    bad = [r for r in verdict.results if r.valid is False]
    assert any("put" in r.explanation and r.ops for r in bad)
    involved = {op.f for r in bad for op in r.ops}
    assert "put" in involved and "get" in involved


def test_nemesis_plan_is_seeded(mc_processes) -> None:
    proc = mc_processes.start("sleeper", ["sleep", "30"])
    faults = [process_kill(proc, "a"), process_kill(proc, "b")]

    def plan(seed: int) -> list[tuple[float, str, float]]:
        steps = itertools.islice(Nemesis(faults, seed).plan(), 20)
        return [(round(s.wait, 9), s.fault.label, round(s.hold, 9)) for s in steps]

    assert plan(5) == plan(5)
    assert plan(5) != plan(6)
    assert {label for _, label, _ in plan(5)} == {"kill:a", "kill:b"}


def test_runs_stop_by_op_budget_and_leave_no_process(mc_chaos, mc_processes, tmp_path) -> None:
    port, server = start_server(mc_processes, tmp_path, "durable")
    result = mc_chaos.run(lambda w: KvClient(port), gen.kv(keys=4), seconds=60, max_ops=40,
                          workers=2, final=gen.final_reads(4))
    assert result.counts["invoke"] == 40 + 4
    assert result.seconds < 60
    result.check(no_lost_acks, no_phantom_reads).assert_valid()
    mc_processes.stop_all()
    assert server not in live_processes()


@pytest.mark.parametrize("broken", ["inject", "heal"])
def test_failing_fault_actions_are_recorded_and_healed(mc_chaos, mc_processes, tmp_path,
                                                       broken) -> None:
    from pytest_mooncake.chaos.nemesis import Fault
    from pytest_mooncake.chaos.runner import ChaosRunError

    port, server = start_server(mc_processes, tmp_path, "durable")
    calls = []

    def boom() -> None:
        calls.append("boom")
        raise RuntimeError("no means")

    fault = Fault("odd", "kv", boom if broken == "inject" else (lambda: calls.append("in")),
                  boom if broken == "heal" else (lambda: calls.append("out")))
    if broken == "inject":
        result = mc_chaos.run(lambda w: KvClient(port), gen.kv(keys=4).stagger(0.01), [fault],
                              seconds=0.6, quiet=(0.05, 0.1), hold=(0.05, 0.1))
        errors = [op.error for op in result.history.ops if op.error and op.process == NEMESIS]
        assert errors and "no means" in errors[0]
        assert "out" in calls  # healed although the injection failed
    else:
        with pytest.raises(ChaosRunError, match="odd:kv could not be healed") as exc:
            mc_chaos.run(lambda w: KvClient(port), gen.kv(keys=4).stagger(0.01), [fault],
                         seconds=0.6, quiet=(0.05, 0.1), hold=(0.05, 0.1))
        heals = [op for op in exc.value.result.history.ops if op.f == "heal" and op.type == "info"]
        assert len(heals) >= 2 and all("no means" in op.error for op in heals)
