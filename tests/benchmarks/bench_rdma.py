"""Benchmarks of the reference RDMA path (CO-11 and the controlled scheduler's budget).

Run: ``.venv/bin/python tests/benchmarks/bench_rdma.py [--quick]``. Prints a table:

1. small-slice post-and-complete throughput on simulated verbs (4 KiB slices, 64 per batch,
   one worker driven in this thread) with per-post tokens as wr_id versus the same path with
   the slice as wr_id (only the ownership strategy differs; target: within 5 %);
2. schedules explored per second on a two-worker scenario of about 50 steps (target: at least
   2,000 per second on one core; CPU time of this process, and wall time on a shared machine);
3. how many schedules the default strategy (``mix``: PCT and random walk alternately), PCT
   alone and a random walk alone need to expose each legacy failure: the median over several
   exploration seeds; the default must need no more than the random walk on every scenario.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reference_engine.profiles import RFC  # noqa: E402
from reference_engine.rdma.rdma_policies import SliceOwnership, TokenOwnership  # noqa: E402
from reference_engine.rdma.sim.exploration import (  # noqa: E402
    STRATEGIES,
    explore,
    run_once,
    strategy_for,
)
from reference_engine.rdma.sim.scenarios import SCENARIOS, build  # noqa: E402
from reference_engine.rdma.sim.sim_cluster import SimCluster  # noqa: E402
from reference_engine.rdma.verbs import Opcode  # noqa: E402

SLICE = 4096
BATCH = 64


def hot_path(ownership, batches: int, points: list | None = None) -> float:
    """Slices per CPU second through submit, post, deliver, poll and completion handling."""
    profile = dataclasses.replace(RFC, name=f"bench-{ownership.__name__}",
                                  rdma=dataclasses.replace(RFC.rdma, make_ownership=ownership))
    cluster = SimCluster(profile, slice_size=SLICE, workers_per_ctx=1)
    a = cluster.add_node("A", buffer_len=BATCH * SLICE)
    b = cluster.add_node("B", buffer_len=BATCH * SLICE)
    tr = a.transport
    worker = tr.contexts[0].pool.run(0)
    request = [(Opcode.RDMA_WRITE, a.buffer_addr, BATCH * SLICE, b.buffer_addr)]
    for _ in range(20):
        task = tr.submit("B", request)
        while not task.done:
            next(worker)
        tr.free_task(task)
    start = time.process_time()
    resumes = 0
    for _ in range(batches):
        task = tr.submit("B", request)
        while not task.done:
            next(worker)
            resumes += 1
        tr.free_task(task)
    elapsed = time.process_time() - start
    assert task.status() == "COMPLETED"
    if points is not None:
        points.append(resumes / batches)
    return batches * BATCH / elapsed


def free_running(profile: str, batches: int) -> float:
    """Slices per wall second with real worker threads (2 per NIC, 2 NICs) and 4 batches in flight."""
    cluster = SimCluster(profile, slice_size=SLICE)
    a = cluster.add_node("A", ["n0", "n1"], buffer_len=4 * BATCH * SLICE)
    b = cluster.add_node("B", ["n0", "n1"], buffer_len=4 * BATCH * SLICE)
    tr = a.transport
    cluster.start()
    try:
        start = time.perf_counter()
        tasks = []
        for i in range(batches):
            off = (i % 4) * BATCH * SLICE
            tasks.append(tr.submit("B", [(Opcode.RDMA_WRITE, a.buffer_addr + off, BATCH * SLICE,
                                          b.buffer_addr + off)]))
            while len(tasks) >= 4:
                tasks = [t for t in tasks if not t.done]
                time.sleep(0.0001)
        while any(not t.done for t in tasks):
            time.sleep(0.0001)
        elapsed = time.perf_counter() - start
    finally:
        cluster.stop()
    return batches * BATCH / elapsed


def schedules_per_second(strategy: str, n: int) -> tuple[float, float, float]:
    steps = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        outcome = run_once("two_worker_batch", "rfc", strategy_for(strategy, i, index=i))
        assert outcome.ok, outcome.violations
        steps += outcome.steps
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return n / cpu, n / wall, steps / n


def schedules_to_expose(scenario: str, strategy: str, depth: int | None, seeds: int) -> list[int]:
    counts = []
    for seed in range(seeds):
        result = explore(scenario, "legacy", 5000, strategy, seed=seed, depth=depth)
        counts.append(result.schedules if result.found else 10**9)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps, batches = (3, 150) if args.quick else (7, 400)
    n_sched, seeds = (300, 7) if args.quick else (1500, 21)

    tokens, slices, points = [], [], []
    for _ in range(reps):
        tokens.append(hot_path(TokenOwnership, batches, points))
        slices.append(hot_path(SliceOwnership, batches))
    tok, sl = statistics.median(tokens), statistics.median(slices)

    print("## Reference RDMA path benchmarks\n")
    print("| measurement | value |")
    print("|---|---|")
    print(f"| post-and-complete, 4 KiB x 64/batch, tokens as wr_id (median of {reps}) "
          f"| {tok:,.0f} slices/s |")
    print(f"| same path, slice as wr_id | {sl:,.0f} slices/s |")
    print(f"| tokens relative to slice-as-wr_id (target >= 95 %) | {100 * tok / sl:.1f} % |")
    print(f"| yield points resumed per 64-slice batch (the free-running cost of the scheduler "
          f"hooks) | {statistics.median(points):.0f} |")
    for profile in ("rfc", "legacy"):
        rate = statistics.median(free_running(profile, batches // 4) for _ in range(3))
        print(f"| free-running, real threads (2 NICs x 2 workers), {profile} | "
              f"{rate:,.0f} slices/s wall |")
    for strategy in STRATEGIES:
        cpu, wall, steps = schedules_per_second(strategy, n_sched)
        print(f"| schedules/s, two workers, {steps:.0f} steps, {strategy} (target >= 2,000 "
              f"on one core) | {cpu:,.0f} per CPU-second ({wall:,.0f} wall) |")
    print()
    print("| legacy failure (scenario) | default (mix) median | PCT d=2 median | PCT d=3 median "
          "| random median | default <= random | seeds | actors n |")
    print("|---|---|---|---|---|---|---|---|")
    worse = []
    for scenario in SCENARIOS:
        mix = statistics.median(schedules_to_expose(scenario, "mix", None, seeds))
        d2 = statistics.median(schedules_to_expose(scenario, "pct", 2, seeds))
        d3 = statistics.median(schedules_to_expose(scenario, "pct", 3, seeds))
        rw = statistics.median(schedules_to_expose(scenario, "random", None, seeds))
        n = len(build(scenario, "legacy").actors)
        if mix > rw:
            worse.append(scenario)
        print(f"| {scenario} | {mix:g} | {d2:g} | {d3:g} | {rw:g} | "
              f"{'yes' if mix <= rw else 'NO'} | {seeds} | {n} |")
    print()
    print("default strategy at least as good as a random walk on every scenario: "
          + ("yes" if not worse else f"NO ({', '.join(worse)})"))


if __name__ == "__main__":
    main()
