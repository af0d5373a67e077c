"""Chaos runs in Jepsen's spirit: workload generators, a nemesis, a runner, a history, checkers.

The pieces are target-agnostic: a *client* turns generated ops into calls on whatever is under
test, a *fault* is a pair of callables (inject, heal), and checkers read only the history.

Wiring a target takes a client and faults; e.g. engines of the current target::

    from pytest_mooncake import chaos
    from pytest_mooncake.chaos import generator as gen

    def test_replacement(mc_chaos, mc_engine, mc_faults, mc_metadata):
        proxy, listen = mc_faults.proxy("meta", mc_metadata.address)
        a = mc_engine("A")
        b = mc_engine("B", metadata=mc_metadata.through(listen))  # B's metadata via the proxy
        result = mc_chaos.run(
            lambda w: chaos.EngineTransferClient(b, peers={"A": a}),
            gen.transfers(["A"], slots=8).stagger(0.01),
            [chaos.engine_kill(a), chaos.partition(proxy, "metadata")],
            workers=1, final=gen.final_reads(gen.transfer_keys(["A"], 8), f="read"))
        result.check(chaos.transfers_reach_new_instance, chaos.bounded_recovery(10)
                     ).assert_valid()

Modules: ``history`` (ops, JSON lines), ``generator`` (workloads), ``nemesis`` (faults and
their schedule), ``runner`` (``run_chaos``), ``checkers``, ``target_clients`` (adapters over the
Target API); the report of a run: ``run_report`` (files beside the history), ``timeline`` (HTML),
``plot`` (PNG), ``recovery`` (heal to first ok), ``windows`` (fault windows), ``lanes``. The
``mc_chaos`` fixture is in ``pytest_mooncake/fixtures/chaos_runs.py``.
"""

from pytest_mooncake.chaos.checkers import (
    CheckResult,
    Verdict,
    bounded_recovery,
    check,
    no_lost_acks,
    no_phantom_reads,
    no_stale_reads,
    no_torn_descriptors,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.generator import OpSpec, Workload
from pytest_mooncake.chaos.history import History, Op
from pytest_mooncake.chaos.nemesis import (
    Fault,
    Nemesis,
    engine_kill,
    etcd_outage,
    kill_restart,
    latency,
    partition,
    process_kill,
    process_pause,
)
from pytest_mooncake.chaos.recovery import RecoveryTimes, recovery_times
from pytest_mooncake.chaos.run_report import write_report
from pytest_mooncake.chaos.runner import ChaosResult, ChaosRunError, fail, info, ok, run_chaos
from pytest_mooncake.chaos.target_clients import EngineTransferClient

__all__ = [
    "CheckResult", "Verdict", "bounded_recovery", "check", "no_lost_acks", "no_phantom_reads",
    "no_stale_reads", "no_torn_descriptors", "transfers_reach_new_instance",
    "EngineTransferClient", "OpSpec", "Workload", "History", "Op",
    "Fault", "Nemesis", "engine_kill", "etcd_outage", "kill_restart", "latency", "partition",
    "process_kill", "process_pause",
    "RecoveryTimes", "recovery_times", "write_report",
    "ChaosResult", "ChaosRunError", "fail", "info", "ok", "run_chaos",
]
