"""A pinned order at the verbs boundary: the CO RFC's named interleavings on a real build.

The reference engine pins its six RFC interleavings by actor and point. A real build's threads
have no names a script could use, but the stories share one shape that the boundary can force:
a fault lands right after the first post, error completions are delivered first (so the build
retires and retries), every parked call goes on before any completion is delivered, and of the
completions, the newest QP's come first, so what is left of a retired QP (its stale successes and
flushes) arrives last, after the retry. ``StaleLast`` is that order as a strategy object with the
reference strategies' interface (``reset``, ``pick``, ``params``); it reads the action labels
the scheduler puts in its actors' names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_COMPLETION = re.compile(r"^p\d+\.c(?P<qp>\d+)\.\d+:(?P<status>\w+)$")


class StaleLast:
    name = "stale-last"

    def reset(self, actors: Sequence[Any]) -> None:
        self.posted = False

    def pick(self, enabled: Sequence[Any], step: int) -> int:
        names = [a.name for a in enabled]
        faults = [i for i, n in enumerate(names) if n.startswith("fault:")]
        if faults and self.posted:
            return faults[0]
        done = [(i, _COMPLETION.match(n)) for i, n in enumerate(names)]
        errors = [i for i, m in done if m and m["status"] != "success"]
        if errors:
            return errors[0]
        calls = [i for i, m in done if not m and not names[i].startswith("fault:")]
        if calls:
            if ":post" in names[calls[0]]:
                self.posted = True
            return calls[0]
        deliveries = [(int(m["qp"]), -i, i) for i, m in done if m]
        if deliveries:
            return max(deliveries)[2]
        return faults[0]

    def params(self) -> dict[str, Any]:
        return {"st": self.name}
