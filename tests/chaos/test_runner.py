"""The runner's own guarantees: bounded by a deadline even with a stuck client, heals after
an error, the process renumbering of Jepsen after an indeterminate op."""

from __future__ import annotations

import threading

import pytest

from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.generator import Workload
from pytest_mooncake.chaos.nemesis import Fault, Nemesis
from pytest_mooncake.chaos.runner import ChaosRunError, info, ok, run_chaos


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def fault(self) -> Fault:
        return Fault("blink", "x", lambda: self.events.append("inject"),
                     lambda: self.events.append("heal"))


def test_stuck_client_is_reported_and_faults_healed() -> None:
    release = threading.Event()
    recorder = Recorder()

    class Stuck:
        def invoke(self, spec):
            release.wait(30)
            return ok()

    nemesis = Nemesis([recorder.fault()], seed=1, quiet=(0, 0), hold=(5, 5))
    try:
        with pytest.raises(ChaosRunError, match="mc-chaos-worker-0 did not stop within 0.3s"):
            run_chaos(lambda w: Stuck(), Workload(gen.kv(), 1), seconds=0.3, workers=1,
                      nemesis=nemesis, join_timeout=0.3)
    finally:
        release.set()
    assert recorder.events == ["inject", "heal"]


def test_client_factory_error_propagates_after_healing_nothing_started() -> None:
    def client_for(worker: int):
        if worker == 1:
            raise OSError("cannot connect")
        return object()

    with pytest.raises(OSError, match="cannot connect"):
        run_chaos(client_for, Workload(gen.kv(), 1), seconds=5, workers=2)


def test_indeterminate_op_retires_the_process() -> None:
    outcomes = iter([ok(), info("timeout"), ok()])

    class Flaky:
        def invoke(self, spec):
            return next(outcomes)

    result = run_chaos(lambda w: Flaky(), Workload(gen.kv(), 1), seconds=5, workers=1,
                       max_ops=3)
    calls = result.history.calls()
    assert [(c.invoke.process, c.type) for c in calls] == [(0, "ok"), (0, "info"), (1, "ok")]


def test_recovery_phase_runs_the_workload_after_the_last_heal() -> None:
    recorder = Recorder()

    class Fine:
        def invoke(self, spec):
            return ok()

    nemesis = Nemesis([recorder.fault()], seed=1, quiet=(0, 0), hold=(5, 5))
    result = run_chaos(lambda w: Fine(), Workload(gen.kv().stagger(0.01), 1), seconds=0.2,
                       workers=1, nemesis=nemesis, recovery=0.3)
    last_heal = max(op.time for op in result.history.ops if op.f == "heal")
    after = [op for op in result.history.ops if op.type == "ok" and op.time > last_heal]
    assert after, "no workload op ran after the final heal"
    assert {op.process for op in after} == {1}, "recovery ops must use fresh process ids"


class Counting:
    def invoke(self, spec):
        return ok()


def _two_faults(recorder: Recorder) -> list[Fault]:
    return [Fault("blink", "x", lambda: recorder.events.append("inject x"),
                  lambda: recorder.events.append("heal x")),
            Fault("blink", "y", lambda: recorder.events.append("inject y"),
                  lambda: recorder.events.append("heal y"))]


@pytest.mark.parametrize("each_fault", [0, 1, 2])
def test_the_run_lasts_until_each_fault_was_healed(each_fault: int) -> None:
    """A loaded machine can eat a short window before the nemesis's first fault; with
    ``each_fault`` the run goes on (bounded) until every fault happened that often."""
    recorder = Recorder()
    nemesis = Nemesis(_two_faults(recorder), seed=3, quiet=(0.05, 0.05), hold=(0.0, 0.0))
    run_chaos(lambda w: Counting(), Workload(gen.kv().stagger(0.001), 1), seconds=0.01,
              workers=1, nemesis=nemesis, each_fault=each_fault)
    for subject in ("x", "y"):
        assert recorder.events.count(f"heal {subject}") >= each_fault, recorder.events
    if each_fault == 0:
        assert recorder.events == [], "the window was too short for any fault: nothing to prove"


def test_a_fault_that_never_heals_ends_the_run_at_the_fault_timeout() -> None:
    recorder = Recorder()
    nemesis = Nemesis([recorder.fault()], seed=3, quiet=(60, 60), hold=(0, 0))
    result = run_chaos(lambda w: Counting(), Workload(gen.kv().stagger(0.001), 1), seconds=0.01,
                       workers=1, nemesis=nemesis, each_fault=1, fault_timeout=0.2)
    assert result.faults_injected == 0 and recorder.events == []


def test_the_systems_exceptions_are_indeterminate_a_client_bug_ends_the_run() -> None:
    """A refused connection (OSError) or an exception marked ``system_answer`` is the system's
    answer: recorded ``info``. A TypeError in the client is not: the run ends in
    ChaosRunError naming it, so no checker judges a history the client made up."""

    class DriverGone(RuntimeError):
        system_answer = True

    answers = iter([ConnectionRefusedError("refused"), DriverGone("driver died")])

    class Answering:
        def invoke(self, spec):
            raise next(answers, None) or TypeError("unsupported operand")

    with pytest.raises(ChaosRunError, match="raised TypeError .*a bug of the client") as err:
        run_chaos(lambda w: Answering(), Workload(gen.kv(), 1), seconds=5, workers=1)
    history = err.value.result.history
    infos = [op.error for op in history.ops if op.type == "info"]
    assert infos[:2] == ["ConnectionRefusedError: refused", "DriverGone: driver died"]
    assert "TypeError" in infos[2]
    assert len(infos) == 3, "the worker stopped at the client's bug"
