"""Checker cost on synthetic histories of growing size (a register workload, 3 workers).

    .venv/bin/python tests/benchmarks/bench_chaos_checkers.py [--sizes 2000,20000]

Prints one row per history size: ops, then seconds per checker.
"""

from __future__ import annotations

import argparse
import random
import time

from pytest_mooncake.chaos.checkers import (
    no_lost_acks,
    no_phantom_reads,
    no_stale_reads,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.history import Op


def synthetic(n_calls: int, keys: int = 24, seed: int = 1) -> list[Op]:
    """A linearizable register history: calls of 3 processes against one in-memory map."""
    rng = random.Random(seed)
    state: dict[str, str] = {}
    ops, t, index = [], 0, 0
    for i in range(n_calls):
        key = f"k{rng.randrange(keys)}"
        f = rng.choice(("put", "put", "get", "get", "remove"))
        final = i >= n_calls - keys
        if final:
            f, key = "get", f"k{i - (n_calls - keys)}"
        value = f"v{i}" if f == "put" else None
        process = i % 3
        ops.append(Op(index, "invoke", f, process, t, key, value, final=final))
        index += 1
        t += rng.randrange(1, 1000)
        if f == "put":
            state[key] = value
            result = None
        elif f == "remove":
            result = state.pop(key, None) is not None
        else:
            result = state.get(key)
        ops.append(Op(index, "ok", f, process, t, key, result, final=final))
        index += 1
        t += rng.randrange(1, 1000)
    return ops


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000,40000")
    args = parser.parse_args()
    checkers = [no_lost_acks, no_stale_reads, no_phantom_reads, transfers_reach_new_instance]
    print(f"{'calls':>8} {'ops':>8} " + " ".join(f"{c.__name__:>24}" for c in checkers))
    for size in (int(s) for s in args.sizes.split(",")):
        ops = synthetic(size)
        row = []
        for checker in checkers:
            t0 = time.perf_counter()
            result = checker(ops)
            row.append(time.perf_counter() - t0)
            assert result.valid is not False, result
        print(f"{size:>8} {len(ops):>8} " + " ".join(f"{s:>23.3f}s" for s in row))


if __name__ == "__main__":
    main()
