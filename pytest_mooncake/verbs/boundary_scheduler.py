"""One schedule of real processes, chosen at their verbs calls (issue #25).

The processes run on emulated devices with their scheduling points on (points.py): a thread
reaching a verbs call parks, a completion waits. Each step waits until the parked threads and
held completions of every process stop changing for a quiet window (``quiet_us``), which is
the set that may run now: a thread blocked elsewhere (a mutex of the application, a sleep, a
computation) did not park in the window and is simply not a candidate at this step. The
strategy then picks one action: grant a parked call, or deliver a held completion to its CQ
(a poller that finds it parks at its poll, and which poller takes it is the next choice).

The strategies are the reference scheduler's objects (``RandomWalk``, ``PCT``; ``mix``
alternates them per schedule, as there), handed in by the caller (this package imports only
runtime/); their actors are threads (PCT priorities follow a
thread across its calls) and single completions. Actions are named by labels that do not
depend on thread ids or QP numbers (the n-th thread seen, the n-th QP seen, the WR's position
on its QP), so a schedule's label sequence replays it against a fresh run of the same build:
each replay step waits (bounded) for the action its label names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_mooncake.verbs.control import ProcessGone, VerbsControlError
from pytest_mooncake.verbs.points import PointsState, SchedulingPoints


class Slot:
    """One actor as a strategy sees it: ``index`` (what PCT keys priorities by) and ``name``
    (the action's label, which a pinned order reads)."""

    __slots__ = ("name", "index")

    def __init__(self, index: int):
        self.name = f"slot{index}"
        self.index = index


MAX_ACTORS = 512
"""Actor slots a strategy is reset with (threads and completions of one schedule)."""
DEFAULT_QUIET_US = 3000
DEFAULT_MAX_STEPS = 400
DEFAULT_STALL_S = 30.0
"""How long a schedule may see nothing runnable while its processes have not finished."""
DEFAULT_ACK_STALL_S = 10.0
"""How long nothing may be runnable while a destroy waits for an unacknowledged async event
before the schedule stops as wedged (rdma-core's destroy returns only after the ack; a build
whose event reader cannot ack it, e.g. a lock the destroyer holds, never gets out)."""
REPLAY_WAIT_WINDOWS = 200
"""Quiet windows a replay step waits for the action its label names before it diverges."""


@dataclass(frozen=True)
class Action:
    label: str  # stable across runs of the same build
    actor: str  # the strategy's actor: a thread ("p0.t1") or one completion ("p0.c2.0")
    proc: int  # index of the process
    grant: bool  # True: grant parked call ``ref``; False: deliver held completion ``ref``
    ref: int
    text: str  # what it is, with this run's numbers (for the trace)


@dataclass
class ScheduleRun:
    """What one schedule did: its choices and labels (the replay), the trace of verbs calls and
    what the bounded waits saw."""

    steps: int = 0
    choices: bytearray = field(default_factory=bytearray)
    labels: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    empty_windows: int = 0  # quiet windows with nothing runnable (threads busy elsewhere)
    timeouts: int = 0  # parked calls that went on alone (park timeout)
    stopped: str | None = None  # why the schedule stopped before its processes finished
    wedged: tuple = ()  # the AckWaits (points.py) it stopped on: destroys no ack releases
    diverged: str | None = None  # a replay step whose action never appeared


class Labeller:
    """Names that survive a rerun: threads and QPs by order of first sight (ties by number)."""

    def __init__(self) -> None:
        self.threads: dict[tuple[int, int], int] = {}
        self.qps: dict[tuple[int, int], int] = {}
        self.seq_base: dict[tuple[int, int], int] = {}

    def _order(self, table: dict, proc: int, numbers: Sequence[int]) -> None:
        for n in sorted(set(numbers)):
            table.setdefault((proc, n), sum(1 for p, _ in table if p == proc))

    def see(self, proc: int, state: PointsState) -> None:
        self._order(self.threads, proc, [c.tid for c in state.parked])
        self._order(self.qps, proc, [h.qp for h in state.held] + [c.qp for c in state.parked if c.qp])
        for h in state.held:
            self.seq_base.setdefault((proc, h.qp), h.seq)

    def actions(self, proc: int, state: PointsState) -> list[Action]:
        out = []
        for c in state.parked:
            thread = f"p{proc}.t{self.threads[(proc, c.tid)]}"
            what = c.point + (f".q{self.qps[(proc, c.qp)]}" if c.qp else "")
            if c.point == "modify":
                what += f".s{c.arg}"
            out.append(Action(f"{thread}:{what}", thread, proc, True, c.id,
                              f"p{proc} thread {c.tid} {c.point} qp={c.qp} cq={c.cq} "
                              f"wr_id={c.wr_id:#x} arg={c.arg}"))
        for h in state.held:
            q = self.qps[(proc, h.qp)]
            name = f"p{proc}.c{q}.{h.seq - self.seq_base[(proc, h.qp)]}"
            out.append(Action(f"{name}:{h.status}", name, proc, False, h.id,
                              f"p{proc} deliver completion qp={h.qp} wr_id={h.wr_id:#x} "
                              f"seq={h.seq} status={h.status}"))
        return out


def _always() -> bool:
    return True


class BoundaryScheduler:
    """Drives the scheduling points of ``points`` (one per process) through one schedule."""

    def __init__(self, points: Sequence[SchedulingPoints], *, quiet_us: int = DEFAULT_QUIET_US,
                 max_steps: int = DEFAULT_MAX_STEPS, stall_s: float = DEFAULT_STALL_S,
                 ack_stall_s: float = DEFAULT_ACK_STALL_S):
        if quiet_us < 100:
            raise ValueError(f"quiet_us={quiet_us}: a quiet window under 100 us sees threads "
                             f"between two calls as blocked")
        self.points = list(points)
        self.quiet_us = quiet_us
        self.max_steps = max_steps
        self.stall_s = stall_s
        self.ack_stall_s = ack_stall_s
        self._waits: list = []

    def _snapshot(self, labeller: Labeller, run: ScheduleRun) -> list[Action]:
        actions: list[Action] = []
        self._waits = []
        for proc, pts in enumerate(self.points):
            try:
                state = pts.wait_quiet(self.quiet_us, timeout=max(1.0, self.quiet_us / 1e5))
            except ProcessGone:
                continue
            run.timeouts = max(run.timeouts, state.timeouts)
            self._waits += state.ack_waits
            labeller.see(proc, state)
            actions += labeller.actions(proc, state)
        return actions

    def _apply(self, action: Action, faults: dict[str, Callable[[], None]]) -> str:
        """Grant, deliver or inject; what went wrong instead (a call that went on alone at
        its park timeout, a completion whose CQ is gone, a process that exited), or ""."""
        if action.proc < 0:
            faults.pop(action.label.split(":", 1)[1])()
            return ""
        pts = self.points[action.proc]
        try:
            if action.grant:
                pts.grant(action.ref)
            else:
                pts.control.release([action.ref])
        except VerbsControlError as exc:
            return f" [not applied: {exc}]"
        return ""

    def run(self, strategy, finished: Callable[[], bool],
            replay: Sequence[str] | None = None,
            faults: Mapping[str, Callable[[], None]] | None = None) -> ScheduleRun:
        """One schedule: ``strategy`` (a reference strategy object) picks, or ``replay`` (a
        label sequence) dictates; it ends when ``finished()`` and nothing is runnable, at
        ``max_steps``, after ``stall_s`` of nothing runnable, or after ``ack_stall_s`` of
        nothing runnable while a destroy waits as long for an unacknowledged event (``wedged``). ``faults``: one-shot actions
        (a QP-fatal, a device event) that are candidates at every step until chosen once, so
        the strategy places them among the verbs calls; one with a ``ready()`` method is a
        candidate only at steps where it returns True. The points are turned off at the end
        (everyone goes on, everything held is delivered)."""
        pending_faults = dict(faults or {})
        slots = [Slot(i) for i in range(MAX_ACTORS)]
        if strategy is not None:
            strategy.reset(slots)
        index: dict[str, int] = {}
        labeller, run = Labeller(), ScheduleRun()
        idle_since: float | None = None
        waited = 0
        try:
            while run.steps < self.max_steps:
                actions = self._snapshot(labeller, run)
                if actions:  # a fault is a choice only beside something that runs anyway
                    actions += [Action(f"fault:{name}", f"fault:{name}", -1, False, 0,
                                       f"fault {name}") for name in sorted(pending_faults)
                                if getattr(pending_faults[name], "ready", _always)()]
                if not actions:
                    if finished():
                        return run
                    idle_since = idle_since or time.monotonic()
                    run.empty_windows += 1
                    idle = time.monotonic() - idle_since
                    wedged = tuple(w for w in self._waits if w.unacked
                                   and w.waited_us >= self.ack_stall_s * 1e6)
                    if wedged and idle >= self.ack_stall_s:
                        run.wedged = wedged
                        run.stopped = (f"nothing runnable for {idle:.0f} s while "
                                       + "; ".join(w.describe() for w in wedged))
                        return run
                    if idle > self.stall_s:
                        run.stopped = f"nothing runnable for {self.stall_s:g} s"
                        return run
                    continue
                idle_since = None
                for a in sorted(actions, key=lambda a: a.label):
                    if a.actor not in index and len(index) < MAX_ACTORS:
                        index[a.actor] = len(index)
                enabled = sorted(actions, key=lambda a: (index.get(a.actor, MAX_ACTORS - 1), a.label))
                if replay is not None:
                    if run.steps >= len(replay):
                        run.stopped = "the replayed schedule ended"
                        return run
                    match = [i for i, a in enumerate(enabled) if a.label == replay[run.steps]]
                    if not match:
                        waited += 1
                        if waited > REPLAY_WAIT_WINDOWS:
                            run.diverged = (f"step {run.steps}: {replay[run.steps]} never became "
                                            f"runnable; runnable: "
                                            f"{', '.join(a.label for a in enabled)}")
                            return run
                        continue
                    i = match[0]
                else:
                    chosen_from = [slots[index.get(a.actor, MAX_ACTORS - 1)] for a in enabled]
                    for slot, a in zip(chosen_from, enabled, strict=True):
                        slot.name = a.label  # what a pinned order reads (pinned_orders.py)
                    i = strategy.pick(chosen_from, run.steps)
                waited = 0
                action = enabled[i]
                note = self._apply(action, pending_faults)
                run.choices.append(min(i, 255))
                run.labels.append(action.label)
                run.trace.append(f"{run.steps:4d} {action.label:<28} {action.text} "
                                 f"(of {len(enabled)}){note}")
                run.steps += 1
            run.stopped = f"max_steps={self.max_steps} reached"
            return run
        finally:
            for pts in self.points:
                try:
                    pts.off()
                except ProcessGone:
                    pass
