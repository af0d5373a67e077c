"""Workload generators: same seed, same ops; composition bounds and shapes the stream."""

from __future__ import annotations

import itertools

import pytest

from pytest_mooncake.chaos import generator as g


def _take(workload: g.Workload, worker: int, n: int) -> list[g.OpSpec]:
    return list(itertools.islice(workload.for_worker(worker), n))


WORKLOAD = g.mix(g.kv(keys=6, scan=1), g.transfers(["A", "B"], slots=4),
                 weights=[3, 1]).stagger(0.01)


def test_same_seed_same_ops_per_worker() -> None:
    a = _take(g.Workload(WORKLOAD, seed=7), 1, 200)
    b = _take(g.Workload(WORKLOAD, seed=7), 1, 200)
    assert a == b
    assert {op.f for op in a} == {"put", "get", "remove", "scan", "write", "read"}


def test_other_seed_or_worker_gives_other_ops() -> None:
    base = _take(g.Workload(WORKLOAD, seed=7), 1, 50)
    assert _take(g.Workload(WORKLOAD, seed=8), 1, 50) != base
    assert _take(g.Workload(WORKLOAD, seed=7), 2, 50) != base


def test_written_values_are_unique_across_workers() -> None:
    workload = g.Workload(g.kv(keys=2, get=0, remove=0), seed=1)
    values = [op.value for w in range(3) for op in _take(workload, w, 100)]
    assert len(values) == len(set(values)) == 300


def test_limit_and_ops() -> None:
    specs = list(g.Workload(g.kv().limit(5), seed=0).for_worker(0))
    assert len(specs) == 5
    fixed = [g.OpSpec("get", "a"), g.OpSpec("get", "b")]
    assert list(g.Workload(g.ops(*fixed), seed=0).for_worker(0)) == fixed


def test_time_limit_ends_the_stream_on_its_clock() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.25
        return now[0]

    specs = list(g.Workload(g.time_limit(1.0, g.kv()), seed=0, clock=clock).for_worker(0))
    assert len(specs) == 3


def test_mix_ends_when_all_parts_end_and_respects_weights() -> None:
    gen = g.mix(g.ops(g.OpSpec("a")).limit(1), g.kv(get=1, put=0, remove=0).limit(3))
    fs = sorted(op.f for op in g.Workload(gen, seed=3).for_worker(0))
    assert fs == ["a", "get", "get", "get"]
    only_kv = g.mix(g.ops(g.OpSpec("never")), g.kv(), weights=[0, 1]).limit(50)
    assert "never" not in {op.f for op in g.Workload(only_kv, seed=3).for_worker(0)}


def test_stagger_delays_and_final_reads() -> None:
    delays = [op.delay for op in g.Workload(g.kv().stagger(0.1).limit(100), 5).for_worker(0)]
    assert all(0 <= d < 0.2 for d in delays) and len(set(delays)) > 50
    finals = list(g.Workload(g.final_reads(3), 0).for_worker(0))
    assert [(op.f, op.key, op.final) for op in finals] == [
        ("get", "k0", True), ("get", "k1", True), ("get", "k2", True)]


def test_bad_arguments_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="at least one key"):
        g.kv(keys=[])
    with pytest.raises(ValueError, match="2 generators but 1 weights"):
        g.mix(g.kv(), g.kv(), weights=[1])
