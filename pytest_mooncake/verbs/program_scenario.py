"""A scenario at the verbs boundary that is one run of a small program per schedule.

The program runs on an emulated fabric and speaks a three-line handshake on stdin/stdout:
it prints ``ready`` once set up (QPs connected) and waits for a line, during which the
controller turns its scheduling points on; it prints ``done`` when its threads ended and waits
for another line, during which the controller reads its post and poll logs; then it tears down
and exits. ``check(lines, posts, polls)`` turns what it printed and the logs into violations.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_mooncake.verbs.boundary_exploration import ScheduleOutcome
from pytest_mooncake.verbs.boundary_scheduler import (
    DEFAULT_MAX_STEPS,
    DEFAULT_QUIET_US,
    BoundaryScheduler,
)
from pytest_mooncake.verbs.control import PostedWr
from pytest_mooncake.verbs.fabric import EmulatedFabric
from pytest_mooncake.verbs.points import PolledCompletion, SchedulingPoints

Check = Callable[[list[str], list[PostedWr], list[PolledCompletion]], list[str]]


class _Lines:
    """A child's stdout, line by line, read by a thread (a wait for a line has a deadline)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> str:
        with self._cv:
            ok = self._cv.wait_for(lambda: self._closed or any(
                x.startswith(prefix) for x in self.lines), timeout)
            hit = [x for x in self.lines if x.startswith(prefix)]
        if not hit:
            why = "it exited" if ok else f"{timeout:g} s passed"
            raise RuntimeError(f"the program never printed {prefix!r} ({why}); it printed: "
                               f"{self.lines}")
        return hit[0]

    def has(self, prefix: str) -> bool:
        with self._cv:
            return self._closed or any(x.startswith(prefix) for x in self.lines)


class ProgramScenario:
    independent = True  # a new process per schedule

    def __init__(self, name: str, argv: Sequence[str], fabric: EmulatedFabric, check: Check, *,
                 quiet_us: int = DEFAULT_QUIET_US, max_steps: int = DEFAULT_MAX_STEPS,
                 timeout: float = 60.0):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.fabric = fabric
        self.check = check
        self.quiet_us = quiet_us
        self.max_steps = max_steps
        self.timeout = timeout
        binary = Path(self.argv[0]).read_bytes()
        self.build = (f"{Path(self.argv[0]).name}@{hashlib.sha256(binary).hexdigest()[:12]} "
                      + " ".join(self.argv[1:]))

    def run_schedule(self, strategy, replay: Sequence[str] | None) -> ScheduleOutcome:
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.fabric.apply())
        try:
            out = _Lines(proc.stdout)
            out.wait_for("ready", self.timeout)
            points = SchedulingPoints(self.fabric.control(proc.pid, timeout=self.timeout))
            points.on()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            scheduler = BoundaryScheduler([points], quiet_us=self.quiet_us,
                                          max_steps=self.max_steps)
            run = scheduler.run(strategy, lambda: out.has("done"), replay)
            out.wait_for("done", self.timeout)
            posts, polls = points.control.posts(), points.polls()
            proc.stdin.write("exit\n")
            proc.stdin.flush()
            rc = proc.wait(timeout=self.timeout)
            stderr = proc.stderr.read()
            violations = self.check(list(out.lines), posts, polls)
            if rc != 0:
                violations.append(f"{Path(self.argv[0]).name} exited {rc}: {stderr.strip()[-500:]}")
            if run.diverged:
                violations.append(f"the replay diverged: {run.diverged}")
            observed = "\n".join(
                [f"  program: {x}" for x in out.lines]
                + [f"  post #{p.n} qp={p.qp} wr_id={p.wr_id:#x} tid={p.tid} state={p.qp_state}"
                   for p in posts]
                + [f"  poll #{c.n} qp={c.qp} wr_id={c.wr_id:#x} status={c.status} tid={c.tid} "
                   f"after post #{c.after_post}" for c in polls])
            return ScheduleOutcome(run, violations, observed)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
