"""Telling a build that did not finish from a machine that did not let it run.

A fixed wall-clock deadline reads a starved machine (load 20-50 on two cores) as a build that
never finished. Linux counts, per thread, the time it sat runnable without a CPU
(``/proc/PID/task/TID/schedstat``, second field). ``StarvedDeadline`` stretches a deadline by
the longest such wait among the threads of the processes it depends on, up to a cap; when the
cap ends it while those threads were starved, the wait says so (``starved_out``) and the caller
reports that the harness could not establish its precondition instead of judging the build.
A deadlocked build's threads sleep (they are not runnable), so the deadlock does not stretch
it; where the build also spins (a CQ poller), its spinning thread is starved under load too, so
a wait also ends, judged, once a thread of the build ran ``PROGRESS_CPU`` seconds on a CPU: the
scheduler shares a CPU fairly among runnable threads, so any thread of the build that was ready
to end the transfer had its turn (0.3.13.post1's verbs-boundary deadlock: a poller of A ran
75.8 s of 240 s while the transfer never ended).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

STRETCH_CAP = 4.0
"""A deadline stretched by starvation ends at most at this multiple of its own length."""
PROGRESS_CPU = 5.0
"""Seconds on a CPU of one thread of the build after which a wait past its wall-clock deadline
is judged however starved the machine was (a transfer of a few KiB needs milliseconds)."""

Sample = Mapping[tuple[int, int], tuple[float, float]]
"""(pid, tid) -> (seconds on a CPU, seconds runnable without one)."""


def schedstat(pids: Iterable[int]) -> dict[tuple[int, int], tuple[float, float]]:
    """Each live thread of ``pids``: seconds on a CPU and seconds runnable without one."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                ran, waited = task.read_text().split()[:2]
            except (OSError, ValueError):
                continue  # the thread (or the process) ended while read
            out[(pid, int(task.parent.name))] = (int(ran) / 1e9, int(waited) / 1e9)
    return out


@dataclass
class StarvedDeadline:
    """A deadline of ``timeout`` seconds of a wall clock that stops while the threads of
    ``pids`` sat runnable without a CPU, ended at ``cap`` times ``timeout`` regardless."""

    timeout: float
    pids: tuple[int, ...]
    names: Mapping[int, str] = field(default_factory=dict)
    ours: tuple[int, ...] = ()
    """Pids of the harness among ``pids``: their starvation stretches the wait, their CPU is no
    progress of the build."""
    cap: float = STRETCH_CAP
    clock: Callable[[], float] = time.monotonic
    sample: Callable[[Iterable[int]], Sample] = schedstat
    started: float = field(init=False)
    sampled: float = field(init=False)
    first: Sample = field(init=False)
    last: Sample = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.sampled = self.clock()
        self.first = self.last = self.sample(self.pids)

    def _delta(self, index: int) -> dict[tuple[int, int], float]:
        return {k: v[index] - self.first.get(k, (0.0, 0.0))[index] for k, v in self.last.items()}

    def elapsed(self) -> float:
        """Wall seconds from the start to the last sample."""
        return self.sampled - self.started

    def starved(self) -> float:
        """The longest a watched thread sat runnable without a CPU since the start."""
        return min(max(self._delta(1).values(), default=0.0), self.elapsed())

    def cpu(self, pid: int) -> float:
        """Seconds on a CPU the threads of ``pid`` had since the start."""
        return sum(v for (p, _), v in self._delta(0).items() if p == pid)

    def thread(self, pid: int, tid: int) -> tuple[float, float]:
        """(seconds on a CPU, seconds runnable without one) of thread ``tid`` of ``pid`` since
        the start (zeros for a thread never read)."""
        return (self._delta(0).get((pid, tid), 0.0), self._delta(1).get((pid, tid), 0.0))

    def busiest(self) -> float:
        """The most seconds on a CPU one thread of the build had since the start."""
        return max((v for (p, _), v in self._delta(0).items() if p not in self.ours),
                   default=0.0)

    def had_its_time(self) -> bool:
        """Whether the build had ``timeout`` seconds it could run, or a thread of it ran
        ``PROGRESS_CPU`` seconds past the wall-clock deadline: a wait then ending is judged."""
        elapsed = self.elapsed()
        return (elapsed - self.starved() >= self.timeout
                or (elapsed >= self.timeout and self.busiest() >= PROGRESS_CPU))

    def refresh(self) -> StarvedDeadline:
        """Read every thread now (``expired`` reads them only once the deadline is due)."""
        self.last, self.sampled = self.sample(self.pids), self.clock()
        return self

    def expired(self) -> bool:
        now = self.clock()
        if now - self.started < self.timeout:
            return False  # nothing can end it sooner: no reading of every thread per poll
        self.last, self.sampled = self.sample(self.pids), now
        return self.had_its_time() or self.elapsed() >= self.cap * self.timeout

    def starved_out(self) -> bool:
        """Whether it ended by its cap without the build having had its time (so nothing the
        build did may be judged from it)."""
        return not self.had_its_time()

    def describe(self) -> str:
        """What the wait saw of the machine, for a message."""
        ran = ", ".join(f"{self.names.get(p, p)} {self.cpu(p):.1f}s" for p in self.pids)
        return (f"in {self.elapsed():.1f}s (deadline {self.timeout:g}s of CPU-available time, "
                f"cap {self.cap * self.timeout:g}s), the longest any thread waited runnable for "
                f"a CPU was {self.starved():.1f}s; CPU used: {ran}; the busiest thread of the "
                f"build ran {self.busiest():.1f}s")
