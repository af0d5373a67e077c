"""What an emulated RDMA cluster showed when it did not come to rest before a deadline.

``EmulatedRdmaCluster.settle()`` waits for a free-running build to finish what it was given.
When it does not, a bare ``False`` told a test nothing, and the test's message ("the cluster
did not settle") read as a fault of the harness. ``NotQuiescent`` carries, instead, what the
build was seen doing at the deadline: transfers it never ended, async events it never
acknowledged, completions it never polled, WRs still outstanding, a process that died, and
what kept moving on its NICs during the wait (posts, QPs created and destroyed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_mooncake.targets.base import NotQuiescent
from pytest_mooncake.verbs.control import Counters

__all__ = ["NotQuiescent", "NodeView", "Watch", "blocked_threads", "describe"]


@dataclass(frozen=True)
class NodeView:
    """One node's NICs at one moment, reduced to what tells motion from rest."""

    name: str
    alive: bool
    posted: int = 0
    completed: int = 0
    polled: int = 0
    events: int = 0
    acked: int = 0
    qps: frozenset[int] = frozenset()
    busy: tuple[str, ...] = ()  # what is outstanding and not kept back by the test
    kept: int = 0  # WRs the test keeps back (held, also on QPs since destroyed, or stalled
    # behind an execution hold)

    @classmethod
    def of(cls, name: str, counters: Counters, kept: dict[int, int]) -> NodeView:
        busy = [f"{name}: {counters.events - counters.acked} of {counters.events} async "
                f"event(s) never acknowledged (ibv_ack_async_event)"] \
            if counters.events != counters.acked else []
        busy += [f"{name}: QP {q.qpn} ({q.dev}, {q.state}) has {q.outstanding - kept[q.qpn]} "
                 f"WR(s) outstanding whose completions it never polled"
                 for q in counters.qps.values() if q.outstanding > kept[q.qpn]]
        busy += [f"{name}: CQ {cq.id} ({cq.dev}) holds {cq.queued} completion(s) never polled"
                 for cq in counters.cqs.values() if cq.queued]
        return cls(name, True, counters.posted, counters.completed, counters.polled,
                   counters.events, counters.acked, frozenset(counters.qps), tuple(busy),
                   max(sum(kept.values()), counters.held))


@dataclass
class Watch:
    """The first and the latest view of every node during one wait, and when it last moved."""

    first: dict[str, NodeView] = field(default_factory=dict)
    last: dict[str, NodeView] = field(default_factory=dict)

    def see(self, views: Iterable[NodeView]) -> None:
        for v in views:
            self.first.setdefault(v.name, v)
            self.last[v.name] = v

    def motion(self) -> list[str]:
        """What changed on each node's NICs between the first and the latest view."""
        out = []
        for name, now in self.last.items():
            was = self.first[name]
            if not now.alive:
                continue
            moved = [f"{what} {n}" for what, n in (
                ("posted", now.posted - was.posted), ("polled", now.polled - was.polled),
                ("raised events", now.events - was.events)) if n]
            made, gone = len(now.qps - was.qps), len(was.qps - now.qps)
            if made or gone:
                moved.append(f"created {made} and destroyed {gone} QP(s)")
            if moved:
                out.append(f"{name} {', '.join(moved)}")
        return out


def describe(timeout: float, quiet_for: float, quiet: float, waiting: Sequence[str],
             dead: Sequence[str], watch: Watch, blocked: Mapping[str, list[str]]) -> str:
    """The message of ``NotQuiescent``: the deadline, then everything that was not at rest
    (``blocked``: per node, its threads blocked on a lock or in the verbs layer)."""
    parts = list(dead) + [f"transfer {w} had not ended" for w in waiting]
    for view in watch.last.values():
        parts += view.busy
        if blocked.get(view.name):
            parts.append(f"{view.name}'s threads blocked: " + " | ".join(blocked[view.name]))
    moving = watch.motion()
    if moving:
        parts.append(f"during the wait {'; '.join(moving)}")
    if quiet_for < quiet:
        parts.append(f"the NICs never stayed unchanged for {quiet:g}s (last change "
                     f"{quiet_for:.1f}s before the deadline)")
    return (f"the build did not come to rest within {timeout:g}s: "
            + ("; ".join(parts) or "nothing outstanding, yet no quiet period was seen"))


WAITS = ("ibv_destroy_qp", "ibv_destroy_cq", "lll_lock_wait", "pthread_mutex_lock",
         "pthread_rwlock", "Spinlock", "set_active", "ContextEvents", "AsyncEvent")
"""Frames that say a thread is blocked on a lock, in the verbs layer or inside the build's
async-event handling (an idle thread waits in epoll_wait, nanosleep, a condition variable of
its own, or polls an empty CQ)."""
FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?([^\s(]+)")
THREAD = re.compile(r"^Thread \d+ .*\(LWP (\d+)\)(?: \"([^\"]*)\")?")


def blocked_threads(stacks: str, depth: int = 6, reach: int = 10) -> list[str]:
    """From gdb's ``thread apply all bt``: each thread with a frame among its innermost
    ``reach`` that blocks on a lock or in ``ibv_destroy_qp``, as ``name/tid: f <- caller ...``
    (its innermost ``depth`` functions)."""
    out, name, frames = [], "", []

    def flush() -> None:
        if name and any(w in f for f in frames[:reach] for w in WAITS):
            out.append(f"{name}: {' <- '.join(_short(f) for f in frames[:depth])}")

    for line in stacks.splitlines():
        line = line.strip()
        if (t := THREAD.match(line)):
            flush()
            name, frames = f"{t.group(2) or 'thread'}/{t.group(1)}", []
        elif (m := FRAME.match(line)):
            frames.append(m.group(1))
    flush()
    return out


def _short(function: str) -> str:
    return function.removeprefix("mooncake::")[-60:]
