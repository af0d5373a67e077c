"""The master flags and environment each column's tests actually started masters with: a test
adds its own (``snapshots=True``, ``client_ttl``) to the profile, so the report lists every
distinct set it saw, with how many tests used it, beside the profile's planned flags
(``deployment.masters.seen``). Each test carries its sets as a user property, which crosses
xdist; the controller folds them per column."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

SEEN_PROPERTY = "mc_masters_started"
"""User property: one JSON ``{"flags": [...], "env": {...}}`` per master cluster a test started."""


class SeenDeployments:
    """Per column, each distinct master configuration started and the number of tests."""

    def __init__(self) -> None:
        self.by_column: dict[str, Counter[str]] = {}

    def record(self, column: str, when: str, properties: list[tuple[str, Any]]) -> None:
        """Count the sets a test's call-phase report carries (once per test)."""
        if when != "call":
            return
        sets = {value for key, value in properties if key == SEEN_PROPERTY}
        for value in sets:
            self.by_column.setdefault(column, Counter())[value] += 1

    def merge(self, targets: dict[str, dict[str, Any]]) -> None:
        """Add ``masters.seen`` to each column's recorded deployment."""
        for column, counts in self.by_column.items():
            deployment = targets.get(column, {}).get("deployment")
            if not deployment:
                continue
            seen = [{**json.loads(value), "tests": n}
                    for value, n in sorted(counts.items(), key=lambda kv: -kv[1])]
            deployment.setdefault("masters", {})["seen"] = seen
