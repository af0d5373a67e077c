"""Engine log lines read as counters: what an operator can see in a log, under the counter
names the reference engine reports (``refresh_ok``, ``refresh_failed``, ``refresh_forced``,
``snapshots_replaced``, ``replacements``, ``endpoints_retired``, ``retries_exhausted``).

Each target knows its own lines (``LogRule``s); MR-15 asks for log lines as well as counters, so
a build with no counter API is still judged on what its log says. A name with no matching line
is absent from the result, never 0 by assumption."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LogRule:
    """Lines matching ``pattern`` add to ``counter``: 1 each, or the integer of the named
    group ``amount`` when the line carries a count."""

    counter: str
    pattern: re.Pattern[str]


def rule(counter: str, pattern: str) -> LogRule:
    return LogRule(counter, re.compile(pattern))


def count_events(text: str, rules: Iterable[LogRule]) -> dict[str, int]:
    """The counters ``rules`` read from ``text``; a counter whose lines never appear is absent."""
    counts: dict[str, int] = {}
    rules = list(rules)
    for line in text.splitlines():
        for r in rules:
            m = r.pattern.search(line)
            if m:
                amount = int(m.group("amount")) if "amount" in r.pattern.groupindex else 1
                counts[r.counter] = counts.get(r.counter, 0) + amount
    return counts
