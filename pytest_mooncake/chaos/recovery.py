"""Recovery times of a chaos run: from each heal to the first ok operation, per scope.

A *scope* is who recovered: ``any worker`` (the figure ``bounded_recovery`` judges), each worker
lane when there are several, and each *target* the workers' transfers address (the segment of a
``"<segment>/<slot>"`` key). The clock starts at the heal's completion and stops at the first
``ok`` completion in the scope, not counting the nemesis or the final reads (reading a peer's
own memory after the run says nothing about recovery). A figure is None, with the reason, when
the history ended first, the fault was never healed, or the next fault was injected before any
ok: that recovery cannot be measured, as ``bounded_recovery`` cannot judge it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.chaos.checkers import segment_of
from pytest_mooncake.chaos.history import NEMESIS, OK, History, Op
from pytest_mooncake.chaos.lanes import lane_of, lane_order
from pytest_mooncake.chaos.windows import FaultWindow, fault_windows

ANY = "any worker"


@dataclass(frozen=True)
class Recovery:
    scope: str
    seconds: float | None
    first_ok: int | None = None
    """Index of the first ok op in the scope after the heal."""
    why: str = ""
    """Why ``seconds`` is None."""
    short: str = ""
    """``why`` in a few words, for tables."""
    kind: str = "recovered"
    """``recovered``, ``not recovered`` (no ok until the history ended), ``not measured``
    (the next fault came first) or ``never healed``."""

    def text(self) -> str:
        return f"{self.seconds:.3f}s" if self.seconds is not None else f"- ({self.short})"


@dataclass(frozen=True)
class FaultRecovery:
    window: FaultWindow
    scopes: tuple[Recovery, ...]

    @property
    def overall(self) -> Recovery:
        return self.scopes[0]

    def __getitem__(self, scope: str) -> Recovery:
        for r in self.scopes:
            if r.scope == scope:
                return r
        raise KeyError(scope)


@dataclass(frozen=True)
class RecoveryTimes:
    """Per fault window, its recovery in every scope; ``to_json`` for reports."""

    faults: tuple[FaultRecovery, ...]
    scopes: tuple[str, ...]

    def worst(self) -> dict[str, float | None]:
        """Per scope the slowest measured recovery (None: none measured)."""
        out: dict[str, float | None] = {}
        for scope in self.scopes:
            figures = [f[scope].seconds for f in self.faults]
            measured = [s for s in figures if s is not None]
            out[scope] = max(measured) if measured else None
        return out

    def not_recovered(self) -> list[FaultRecovery]:
        """Faults after whose heal no worker had an ok operation until the history ended."""
        return [f for f in self.faults if f.overall.kind == "not recovered"]

    def to_json(self) -> dict[str, Any]:
        return {
            "scopes": list(self.scopes),
            "worst_seconds": {k: None if v is None else round(v, 6)
                              for k, v in self.worst().items()},
            "faults": [{
                "fault": f.window.label, "injected_s": round(f.window.injected_at, 6),
                "healed_s": None if f.window.healed_at is None else round(f.window.healed_at, 6),
                "heal_index": f.window.heal_index,
                "recovery": {r.scope: {"seconds": None if r.seconds is None
                                       else round(r.seconds, 6),
                                       "first_ok": r.first_ok, "kind": r.kind,
                                       **({"why": r.why} if r.why else {})}
                             for r in f.scopes},
            } for f in self.faults],
        }

    def table(self) -> str:
        """A plain-text table: one row per fault, one column per scope."""
        if not self.faults:
            return "no fault was injected"
        head = ["fault", "injected", "healed"] + list(self.scopes)
        rows = [[f.window.label, f"{f.window.injected_at:.3f}s",
                 "never" if f.window.healed_at is None else f"{f.window.healed_at:.3f}s"]
                + [f[s].text() for s in self.scopes] for f in self.faults]
        widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in [head] + rows)


def target_of(op: Op) -> str | None:
    """The segment a worker op addresses, for ``"<segment>/<slot>"`` keys; else None."""
    if isinstance(op.key, str) and "/" in op.key:
        return str(segment_of(op.key))
    return None


def recovery_times(history: History | Iterable[Op], workers: int | None = None
                   ) -> RecoveryTimes:
    """Recovery figures of every fault window of ``history`` (see the module docstring)."""
    ops = history.ops if isinstance(history, History) else list(history)
    windows = fault_windows(ops)
    injects = sorted((w.injected_at, w.label) for w in windows)
    oks: dict[str, list[Op]] = defaultdict(list)
    lanes: set[str] = set()
    targets: set[str] = set()
    for op in ops:
        if op.process == NEMESIS or op.final:
            continue
        lane = lane_of(op, workers)
        lanes.add(lane)
        target = target_of(op)
        if target is not None:
            targets.add(target)
        if op.type != OK:
            continue
        oks[ANY].append(op)
        oks[lane].append(op)
        if target is not None:
            oks[target].append(op)
    for group in oks.values():
        group.sort(key=lambda op: op.time)
    scopes = [ANY] + (sorted(lanes, key=lane_order) if len(lanes) > 1 else []) + sorted(targets)
    end = max((op.time for op in ops), default=0) / 1e9
    times = {scope: [op.time / 1e9 for op in oks[scope]] for scope in scopes}
    out = []
    for w in windows:
        out.append(FaultRecovery(w, tuple(_recovery(scope, w, oks[scope], times[scope],
                                                    injects, end) for scope in scopes)))
    return RecoveryTimes(tuple(out), tuple(scopes))


def _recovery(scope: str, w: FaultWindow, oks: list[Op], times: list[float],
              injects: list[tuple[float, str]], end: float) -> Recovery:
    if w.healed_at is None:
        return Recovery(scope, None, why="the fault was never healed", short="never healed",
                        kind="never healed")
    i = bisect.bisect_left(times, w.healed_at)
    first = oks[i] if i < len(oks) else None
    j = bisect.bisect_right(injects, (w.healed_at, "\uffff"))
    nxt = injects[j] if j < len(injects) else None
    if first is not None and (nxt is None or times[i] <= nxt[0]):
        return Recovery(scope, times[i] - w.healed_at, first.index)
    if nxt is not None:
        return Recovery(scope, None, why=f"{nxt[1]} was injected {nxt[0] - w.healed_at:.3f}s "
                        f"after the heal, before any ok", short="next fault first",
                        kind="not measured")
    return Recovery(scope, None, why=f"no ok operation in the {end - w.healed_at:.3f}s "
                    f"the history went on after the heal",
                    short=f"no ok in {end - w.healed_at:.1f}s", kind="not recovered")
