"""Repeated log lines folded before a log is attached or shown: a failing engine that logs the
same "Connection refused" line 60 times in a row should cost one line and a count, not 60.

Two lines are the same when they differ only in a leading timestamp (glog ``I1201
18:00:00.123456 4242 file.cc:12]``, ISO dates, ``[12.345s]``-style clocks); runs of the same
block of up to ``MAX_PERIOD`` lines fold too (a retry loop that logs two lines per attempt).
The first occurrence is kept whole; the fold says how many times it repeated and over which
time span when the lines carried times.
"""

from __future__ import annotations

import re

MAX_PERIOD = 4
"""Longest block of lines folded as one repeated unit."""
MIN_REPEATS = 3
"""A block repeated fewer times than this stays as it is (two copies fold to no gain)."""

_STAMP = re.compile(
    r"^\s*(?:"
    r"[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+"                    # glog
    r"|\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s*"  # ISO
    r"|\[\s*\d+(?:\.\d+)?s?\]\s*"                                     # [12.345s]
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+"                              # 18:00:00.123
    r")"
)


def _key(line: str) -> str:
    """The line without its leading timestamp (what two repeats share)."""
    return _STAMP.sub("", line, count=1)


def dedupe(text: str) -> str:
    """``text`` with runs of repeated lines (or blocks of up to ``MAX_PERIOD`` lines) folded
    into the first copy and a line ``… repeated N times in all``."""
    lines = text.splitlines()
    keys = [_key(line) for line in lines]
    out: list[str] = []
    i = 0
    while i < len(lines):
        best_period, best_count = 0, 1
        for period in range(1, MAX_PERIOD + 1):
            block = keys[i:i + period]
            if len(block) < period:
                break
            count = 1
            while keys[i + count * period:i + (count + 1) * period] == block:
                count += 1
            if count >= MIN_REPEATS and count * period > best_count * max(best_period, 1):
                best_period, best_count = period, count
        if not best_period:
            out.append(lines[i])
            i += 1
            continue
        out.extend(lines[i:i + best_period])
        span = best_period * best_count
        last = lines[i + span - 1]
        what = "line" if best_period == 1 else f"{best_period} lines"
        until = f" (the last at {last[:len(last) - len(keys[i + span - 1])].strip()})" \
            if keys[i + span - 1] != last else ""
        out.append(f"… the {what} above repeated {best_count} times in all{until}")
        i += span
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
