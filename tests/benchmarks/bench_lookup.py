"""Cached lookup latency within the TTL (target: under 2 microseconds per lookup).

Run: ``.venv/bin/python tests/benchmarks/bench_lookup.py [--n 1000000]``. Prints a table:
a remote segment within TTL (rfc and legacy), a local segment, and, for scale, a lookup that
refreshes every time against an in-memory fetch (TTL 0: decode + validate + swap).
"""

from __future__ import annotations

import argparse
import time

from reference_engine.cache import SegmentCache
from reference_engine.descriptor import encode, tcp_descriptor
from reference_engine.profiles import LEGACY, RFC


def per_call_ns(fn, n: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    args = parser.parse_args()
    raw = encode(tcp_descriptor("peer", [(1 << 30, 1 << 26)], "127.0.0.1", 1234, "ab" * 16))
    rows = []
    for label, profile, ttl in (("rfc, remote within TTL", RFC, 60_000),
                                ("legacy, remote (never expires)", LEGACY, None)):
        cache = SegmentCache(lambda _: raw, profile.engine.cache_policy(ttl),
                             profile.engine.replacement)
        cache.lookup("peer")
        rows.append((label, per_call_ns(lambda c=cache: c.lookup("peer"), args.n)))
    cache = SegmentCache(lambda _: raw, RFC.engine.cache_policy(60_000), RFC.engine.replacement)
    cache.set_local(tcp_descriptor("me", [(1 << 30, 1 << 26)], "127.0.0.1", 1, "cd" * 16))
    rows.append(("local segment", per_call_ns(lambda: cache.lookup("me"), args.n)))
    empty = per_call_ns(lambda: None, args.n)
    rows.append(("(empty lambda call, for scale)", empty))
    cache = SegmentCache(lambda _: raw, RFC.engine.cache_policy(0), RFC.engine.replacement)
    cache.lookup("peer")
    rows.append(("rfc, TTL 0: fetch+decode+swap", per_call_ns(lambda: cache.lookup("peer"),
                                                               max(1, args.n // 100))))
    print(f"{'lookup':40} {'ns/call':>10} {'µs/call':>9}  target < 2 µs")
    for label, ns in rows:
        print(f"{label:40} {ns:10.0f} {ns / 1000:9.3f}")


if __name__ == "__main__":
    main()
