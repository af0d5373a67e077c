"""The controlled scheduler: strategies, blocking, reproducibility, replay tokens."""

import pytest

from reference_engine.rdma import points as P
from reference_engine.rdma.sim.scheduler import (
    PCT,
    RandomWalk,
    Replay,
    RoundRobin,
    ScheduleError,
    Scheduler,
    Scripted,
    decode_token,
    encode_token,
    make_strategy,
)


def _counter_actors(log, n=3, steps=5):
    def actor(name):
        for i in range(steps):
            log.append(name)
            yield f"s{i}"
    return [(f"a{i}", actor(f"a{i}"), lambda: True) for i in range(n)]


def _run(strategy, n=3, steps=5):
    log = []
    result = Scheduler(strategy).run(_counter_actors(log, n, steps))
    return log, result


@pytest.mark.parametrize("make", [lambda: RandomWalk(42), lambda: PCT(42, depth=3, k=15)])
def test_same_seed_same_schedule_and_choices_replay_it(make):
    log1, r1 = _run(make())
    log2, r2 = _run(make())
    assert log1 == log2 and r1.choices == r2.choices and r1.quiescent
    log3, _ = _run(Replay(r1.choices))
    assert log3 == log1


def test_different_seeds_explore_different_orders():
    orders = {tuple(_run(RandomWalk(seed))[0]) for seed in range(20)}
    assert len(orders) > 5


def test_pct_depth_one_runs_by_priority_without_preemption():
    log, _ = _run(PCT(7, depth=1, k=15))
    firsts = [log[i * 5] for i in range(3)]
    assert all(log[i * 5:(i + 1) * 5] == [firsts[i]] * 5 for i in range(3))


def test_pct_change_points_preempt():
    preempted = 0
    for seed in range(30):
        log, _ = _run(PCT(seed, depth=2, k=15))
        runs = sum(1 for i in range(1, len(log)) if log[i] != log[i - 1])
        preempted += runs > 2
    assert preempted > 0


def test_idle_actor_blocks_until_it_has_work():
    box = []

    def consumer():
        while True:
            if box:
                box.pop()
                yield "took"
            else:
                yield P.IDLE

    def producer():
        for _ in range(3):
            box.append(1)
            yield "put"

    trace = []
    result = Scheduler(RoundRobin(), record_trace=True).run(
        [("c", consumer(), lambda: bool(box)), ("p", producer(), lambda: True)])
    trace = result.trace
    assert result.quiescent
    assert [t for t in trace if t[0] == "c"].count(("c", "took")) == 3
    idle_then = [trace[i + 1] for i in range(len(trace) - 1) if trace[i] == ("c", P.IDLE)]
    assert all(t[0] == "p" for t in idle_then)


def test_step_budget_reports_no_quiescence():
    def forever():
        while True:
            yield "spin"

    result = Scheduler(RandomWalk(1), max_steps=50).run([("x", forever(), lambda: True)])
    assert not result.quiescent and result.steps == 50


def test_script_runs_named_actors_to_named_points_then_round_robin():
    log = []
    result = Scheduler(Scripted([("a2", "s2"), ("a0", None)])).run(_counter_actors(log))
    assert log[:4] == ["a2", "a2", "a2", "a0"] and result.quiescent
    with pytest.raises(ScheduleError, match="no actor named"):
        Scheduler(Scripted([("zz", None)])).run(_counter_actors([]))


def test_token_round_trip_and_rejects_garbage():
    fields = {"sc": "x", "pr": "legacy", **PCT(5, 3, 40).params()}
    token = encode_token(fields)
    assert token.startswith("mcs1.") and len(token) < 120
    assert decode_token(token) == fields
    assert make_strategy(decode_token(token)).params() == PCT(5, 3, 40).params()
    replay = Replay(bytes([0, 1, 2, 1, 0]))
    assert make_strategy(decode_token(encode_token(replay.params()))).choices == replay.choices
    for bad in ("nonsense", "mcs1.!!!", "mcs1." + "A" * 20000, encode_token({"x": 1})):
        with pytest.raises(ScheduleError):
            decode_token(bad)
    with pytest.raises(ScheduleError, match="unknown strategy"):
        make_strategy({"st": "dfs"})


def test_an_actor_crash_ends_the_run_and_is_reported():
    def crashes():
        yield "one"
        raise RuntimeError("boom")

    result = Scheduler(RoundRobin()).run([("c", crashes(), lambda: True)])
    assert not result.quiescent and result.crash == "c: RuntimeError: boom"


@pytest.mark.parametrize("profile", ["rfc", "legacy"])
def test_a_finished_run_leaves_no_cyclic_garbage(profile):
    """run_once takes its cluster apart: an exploration builds thousands of clusters, and one
    left to the cycle collector costs it about a sixth of its time."""
    import gc

    from reference_engine.rdma.sim.exploration import run_once, strategy_for
    from reference_engine.rdma.sim.scenarios import EXTRA_SCENARIOS, SCENARIOS

    gc.collect()
    gc.disable()
    try:
        for name in (*SCENARIOS, *EXTRA_SCENARIOS):
            for strategy in ("pct", "random"):
                run_once(name, profile, strategy_for(strategy, 3))
                assert gc.collect() == 0, f"{name} ({strategy}) left cyclic garbage"
            run_once(name, profile, RoundRobin(), pinned=True)
            assert gc.collect() == 0, f"{name} (pinned) left cyclic garbage"
    finally:
        gc.enable()
