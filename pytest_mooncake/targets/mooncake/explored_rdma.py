"""The CO RFC's failure stories explored on a real build at its verbs calls (issue #25).

One engine pair (A with two NICs, B with two) per exploration; each schedule is one transfer
from A to B with the scenario's fault armed, run with A's scheduling points on
(``pytest_mooncake.verbs.boundary_scheduler``): every post, poll of a non-empty CQ, QP state
change, QP destruction and async event of A's threads waits for the strategy, and so does
every completion. What a schedule is judged on is what the build shows from outside: the
transfer's end (it must end; COMPLETED means its bytes landed), the process alive, and the
cluster's ``check()`` (completions never polled, WRs posted to a QP the build retired itself,
a QP destroyed with work outstanding, a retired QP never destroyed).

Scenarios (the names of the reference's RFC scenarios):

- ``stale_completion_after_retry``: slice 0's first attempt fails (retry exceeded), so its QP
  goes to ERR and the slice is retried while slice 1's completion (or flush) of the old QP is
  still to be delivered;
- ``completion_error_retire_while_posting``: four slices, two workers per context: slice 0's
  error retires the endpoint while the other slices are being posted to it;
- ``qp_fatal_races_completion`` / ``reclaim_with_pending_completions``: a QP-fatal on A's QPs
  to B is one more choice of the strategy, among the posts and completions (reclaim: with
  completions still held, which ``check()`` then waits to see reclaimed);
- ``partial_post_bad_wr``: ``ibv_post_send`` returns slice 1 as bad_wr;
- ``handoff_while_flush_drains``: every slice's first attempt fails (retry exceeded), and a
  device-fatal of the NIC A's first WR of the schedule went through is a choice of the strategy
  once that WR is posted, so the build hands a failed slice to A's other NIC while the failed
  QPs' flushes drain (a local RNIC handoff, counted per schedule). The build picks a slice's
  NIC itself (0.3.14 may put a whole schedule on ``mlx5_1``), so the fault follows the first
  post rather than naming a NIC; A's process restarts after a schedule whose fault fired (a
  dead context never comes back), so every schedule has both NICs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.cpu_starvation import STRETCH_CAP, StarvedDeadline
from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.targets.base import (
    Capability,
    PreconditionUnestablished,
    RdmaViolation,
    TargetLacks,
)
from pytest_mooncake.targets.mooncake.memcheck import MemcheckLauncher, engine_errors
from pytest_mooncake.targets.reference.schedule_strategies import REFERENCE_STRATEGIES
from pytest_mooncake.verbs.boundary_exploration import (
    DEFAULT_SCHEDULES,
    BoundaryExploration,
    ScheduleOutcome,
    explore,
    replay,
    token_for,
)
from pytest_mooncake.verbs.boundary_scheduler import BoundaryScheduler
from pytest_mooncake.verbs.pinned_orders import StaleLast
from pytest_mooncake.verbs.points import SchedulingPoints
from pytest_mooncake.verbs.stale_completions import stale_polls

SLICE = 4096
MEMCHECK_ENV = "MC_RDMA_MEMCHECK"
"""A directory: explorations run A's and B's engine processes under valgrind memcheck, with its
XML reports there; an invalid read/write/free in the build's own code FAILs the schedule."""
TRANSFER_TIMEOUT = 60.0
IDLE_BOUND = 10.0
"""Seconds a schedule's end gives the build to poll what the points released at once (a QP's
ERR flushes up to 256 posted receives on 0.3.14) before completions left in a CQ count."""
OPTION_DEFAULT = 200
"""--mc-schedules' default: on a real build it means each scenario's own budget
(``SCENARIO_SCHEDULES``, else the verbs boundary's 40: one transfer per schedule, about a second
each where a retry retires an endpoint)."""
SCENARIOS = (
    "stale_completion_after_retry",
    "completion_error_retire_while_posting",
    "qp_fatal_races_completion",
    "reclaim_with_pending_completions",
    "partial_post_bad_wr",
    "handoff_while_flush_drains",
)
HANDOFF = "handoff_while_flush_drains"
FAULT_SCHEDULES = 120
"""The default budget of the scenarios whose fault is one more choice of the strategy
(``qp_fatal_races_completion``, ``reclaim_with_pending_completions``): where the fault lands
among the posts and which thread holds its event when a worker destroys a QP is a much larger
space than the other scenarios' (tests/benchmarks/bench_deadlock_detection.py measures how
often a budget finds the releases' destroy-vs-event deadlock; docs/rdma-exploration.md)."""
WEDGE_STARVED_S = 2.0
"""A wedge is judged early unless the thread that read the unacknowledged event sat runnable
without a CPU this long and ran less (``_reader_starved``): a starved reader looks wedged too."""
WEDGE_GRACE = 2.0
"""Seconds a transfer is still given after a schedule stopped wedged (its points went off, so
whatever they held goes on) before its destroy is judged one no ack will release."""
SCENARIO_SCHEDULES = {"qp_fatal_races_completion": FAULT_SCHEDULES,
                      "reclaim_with_pending_completions": FAULT_SCHEDULES}


@dataclass
class ExploredRun:
    """One schedule as the suites read a run: violations (kind, detail), tokens, the trace."""

    scenario: str
    violations: list[RdmaViolation]
    token: str
    report: str
    schedules: int = 1

    @property
    def exact_token(self) -> str:
        return self.token


@dataclass
class ExploredResult:
    scenario: str
    schedules_run: int
    distinct: int
    seconds: float
    failure: ExploredRun | None = None
    notes: list[str] = field(default_factory=list)
    handoffs: int | None = None
    """Schedules in which slice 0 was posted through both of A's NICs (a local RNIC handoff);
    None where the scenario does not count them."""

    @property
    def found(self) -> bool:
        return self.failure is not None

    def summary(self) -> str:
        handed = (f", {self.handoffs} with a local NIC handoff" if self.handoffs is not None
                  else "")
        return (f"{self.scenario}: {self.schedules_run} schedule(s) at the verbs boundary "
                f"({self.distinct} distinct{handed}) in {self.seconds:.1f} s, "
                + ("violation" if self.failure else "no violation"))


class GuardedFault:
    """A one-shot fault the strategy may place only at steps where ``ready()`` holds."""

    def __init__(self, fire: Callable[[], None], ready: Callable[[], bool]):
        self.fire = fire
        self.ready = ready

    def __call__(self) -> None:
        self.fire()


class ClusterScenario:
    """A ``BoundaryScenario`` over one emulated cluster of real engines."""

    independent = False  # one engine pair for all schedules

    def __init__(self, name: str, cluster: Any, build: str, quiet_us: int = 5000,
                 max_steps: int = 300):
        if name not in SCENARIOS:
            raise ValueError(f"no scenario {name!r} on a real build (one of "
                             f"{', '.join(SCENARIOS)})")
        self.name = name
        self.cluster = cluster
        self.build = build
        self.quiet_us = quiet_us
        self.max_steps = max_steps
        self.index = 0
        self.last: ScheduleOutcome | None = None
        self.memcheck: Path | None = None
        self.memory_errors = 0
        self.handoffs = 0  # schedules whose slice 0 went through both of A's NICs
        self.fatal = False  # one of A's NICs died in this schedule: A restarts after it
        self.cursor = 0  # A's post log before this schedule
        self.slices = 4 if name in ("completion_error_retire_while_posting",
                                    "partial_post_bad_wr") else 2

    # ------------------------------------------------------------------ one schedule

    def _arm(self, t: int) -> dict[str, Callable[[], None]]:
        c = self.cluster
        if self.name in ("stale_completion_after_retry", "completion_error_retire_while_posting"):
            c.inject_error(t, 0, "RETRY_EXC_ERR")
        if self.name == HANDOFF:  # every slice's first attempt fails, whichever NIC took it
            for index in range(self.slices):
                c.inject_error(t, index, "RETRY_EXC_ERR")
        if self.name == "partial_post_bad_wr":
            c.fail_post(t, 1)
        if self.name in ("qp_fatal_races_completion", "reclaim_with_pending_completions"):
            # the fault is applied from the scheduler's thread: A's event thread reads each
            # event only when the strategy grants it, so nothing waits for the acknowledgements
            return {"qp_fatal": lambda: c.qp_fatal("A", "B", await_ack=False)}
        if self.name == "handoff_while_flush_drains":
            return {"device_fatal": GuardedFault(self._device_fatal,
                                                 lambda: self._first_nic() is not None)}
        return {}

    def _device_fatal(self) -> None:
        nic = self._first_nic()
        assert nic is not None, "the device-fatal fault fired before A posted a WR"
        self.fatal = True
        self.cluster.device_fatal("A", nic)

    def _first_nic(self) -> str | None:
        """The NIC A's first WR of this schedule went through (so its death hands work to the
        other NIC, rather than only steering later posts away), or None before any post."""
        for p in self.cluster.nodes["A"].ctl.posts(since=self.cursor):
            if not p.refused:
                return p.dev
        return None

    def run_schedule(self, strategy, labels: Sequence[str] | None) -> ScheduleOutcome:
        c = self.cluster
        self.index += 1
        length = self.slices * SLICE
        offset = (self.index % 64) * length
        data = (f"s{self.index}-".encode() * length)[:length]
        c.write_local("A", offset, data)
        t = c.submit("A", "B", length, src_offset=offset, dst_offset=offset)
        faults = self._arm(t)
        a = c.nodes["A"]
        points = SchedulingPoints(a.ctl)
        # where the post and poll logs stand (their entries' n), not the logs themselves: a
        # schedule reads only what it adds (the logs grow over the exploration's schedules)
        polls_before = a.ctl.logged("polls")
        posts_before = self.cursor = a.ctl.logged("posts")
        ended = threading.Event()
        errors: list[str] = []
        deadline = transfer_deadline(c)
        give_up_at: list[float] = []  # set when the schedule stopped wedged (plus the grace)

        def drive() -> None:
            try:
                c._flush()
                wait_until(lambda: c.status(t) != "WAITING" or deadline.expired()
                           or bool(give_up_at and time.monotonic() > give_up_at[0]),
                           STRETCH_CAP * TRANSFER_TIMEOUT + 10, f"transfer {t} to end",
                           interval=0.005, max_interval=0.02)
            except Timeout:
                pass
            except Exception as exc:  # noqa: BLE001 (reported as what was observed)
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                ended.set()

        points.on()
        driver = threading.Thread(target=drive, name=f"transfer-{t}", daemon=True)
        driver.start()
        run = None
        try:
            run = BoundaryScheduler([points], quiet_us=self.quiet_us,
                                    max_steps=self.max_steps).run(
                strategy, ended.is_set, labels, faults)
            # a destroy waiting on an ack no thread gives: judged now, not at the 60 s bound,
            # unless the machine starved the event's reader meanwhile (the bound decides then)
            if run.wedged and not _reader_starved(deadline.refresh(), a.pid, run.wedged):
                give_up_at.append(time.monotonic() + WEDGE_GRACE)
        finally:
            driver.join(STRETCH_CAP * TRANSFER_TIMEOUT + 20)
        stacks = ""
        if run.stopped and run.stopped.startswith("nothing runnable") and a.engine.alive():
            stacks = thread_stacks(a.pid)  # who is blocked where, outside the verbs calls
        status = c.status(t)
        wedged = ""
        if give_up_at and status == "WAITING":
            readers = "".join(
                f"; thread {w.acker} ran {ran:.1f}s and sat runnable without a CPU "
                f"{waited:.1f}s" for w in run.wedged if w.acker
                for ran, waited in [deadline.thread(a.pid, w.acker)])
            wedged = (f"wedged: {'; '.join(w.describe() for w in run.wedged)}, with no verbs "
                      f"call runnable meanwhile (ibv_destroy_* returns only once each event is "
                      f"acknowledged){readers}; judged without waiting out the "
                      f"{TRANSFER_TIMEOUT:g} s transfer bound")
        else:
            try:  # the points went off: what they held reached the CQs just now; let it drain
                wait_until(c._nics_idle, IDLE_BOUND, "A's NICs to drain", interval=0.01,
                           max_interval=0.05)
            except Timeout:
                pass  # check() reports what stayed
            status = c.status(t)
        if status == "WAITING" and not wedged and deadline.starved_out():
            raise PreconditionUnestablished(
                f"harness starved of CPU: transfer {t} of schedule {self.index} had not ended, "
                f"but the machine did not let the build run long enough to judge it: "
                f"{deadline.describe()}")
        violations = [f"{v.kind}: {v.detail}" for v in
                      self._judge(t, status, data, offset, deadline, wedged)
                      + stale_retires(run.labels)]
        violations += [f"harness: {e}" for e in errors]
        if self.memcheck is not None:
            found = engine_errors(self.memcheck)
            violations += [f"memory_error: {f}" for f in found[self.memory_errors:]]
            self.memory_errors = len(found)
        posts = a.ctl.posts(since=posts_before) if a.engine.alive() else []
        polls = points.polls(since=polls_before) if a.engine.alive() else []
        stale = stale_polls(posts, polls)
        lo = c._slice_range(t, 0)[0]
        if handed_off(posts, lo, lo + length):
            self.handoffs += 1
        observed = "\n".join(
            [f"  transfer {t}: {status}", *(f"  hazard: {s}" for s in stale)]
            + [f"  post #{p.n} qp={p.qp} wr_id={p.wr_id:#x} laddr={p.laddr:#x} state={p.qp_state}"
               f"{' refused' if p.refused else ''}" for p in posts]
            + _poll_lines(polls)
            + ([f"  threads of A when nothing was runnable:\n{stacks}"] if stacks else []))
        self.last = ScheduleOutcome(run, violations, observed)
        if self.fatal and a.engine.alive():  # a device-fatal context never comes back: a new
            self.fatal = False  # process, so the next schedule has both NICs to hand off between
            c.restart_peer("A")
        return self.last

    def _judge(self, t: int, status: str, data: bytes, offset: int,
               deadline: StarvedDeadline, wedged: str = "") -> list[RdmaViolation]:
        c = self.cluster
        # check() also waits for retired QPs to be destroyed: the next schedule starts from a
        # build with no reclaim pending (a replay then meets the same state); a transfer that
        # never ended says what the machine gave the build meanwhile (not starved: ours to judge)
        out = [RdmaViolation(v.kind, f"{v.detail}: {deadline.describe()}"
                             + (f"; {wedged}" if wedged else ""))
               if v.kind == "stuck_slice" else v for v in c.check(wedged)]
        if status == "COMPLETED" and c.nodes["B"].engine.alive():
            landed = c.read("B", offset, len(data))
            if landed != data:
                bad = next(i for i in range(len(data)) if landed[i] != data[i])
                out.append(RdmaViolation("success_and_failed", (
                    f"transfer {t} ended COMPLETED but B's bytes differ from byte {bad} on "
                    f"(slice {bad // SLICE})")))
        return out


def _reader_starved(deadline: StarvedDeadline, pid: int, wedged: Sequence[Any]) -> bool:
    """Whether a thread that read an unacknowledged event (else, any thread) sat runnable
    without a CPU for WEDGE_STARVED_S and barely ran: then its missing ack may be the machine's
    doing, not the build's. A reader blocked on a lock is not runnable (not starved); one
    spinning for a lock ran (it had its turns)."""
    readers = [w.acker for w in wedged if w.acker]
    if not readers:
        return deadline.starved() >= WEDGE_STARVED_S
    return any(waited >= WEDGE_STARVED_S and ran < WEDGE_STARVED_S
               for ran, waited in (deadline.thread(pid, r) for r in readers))


def transfer_deadline(cluster: Any) -> StarvedDeadline:
    """TRANSFER_TIMEOUT of time in which A's and B's engines and this process could run."""
    pids = {n.pid: name for name, n in cluster.nodes.items() if n.engine.alive()}
    pids[os.getpid()] = "the harness"
    return StarvedDeadline(TRANSFER_TIMEOUT, tuple(pids), pids, ours=(os.getpid(),))


_LABEL = re.compile(r"^(?:p0\.(?:t\d+:(?P<call>modify|post|destroy)\.q(?P<qp>\d+)(?:\.s(?P<state>\d+))?"
                    r"|c(?P<cqp>\d+)\.\d+:(?P<status>\w+))|(?P<fault>fault:\w+))$")


def stale_retires(labels: list[str]) -> list[RdmaViolation]:
    """CO-5 from outside, over one schedule's labels: a QP the build connected after an error
    completion had been delivered (a new generation) must not be moved to ERR by the build
    unless an error completion was delivered after it was connected (its own, or its
    endpoint's other QP's); without a fault the test injected, a retirement of it can only
    come from an older generation's completion or event."""
    errors: list[int] = []
    connected: dict[str, int] = {}
    out = []
    for step, label in enumerate(labels):
        m = _LABEL.match(label)
        if not m:
            continue
        if m["fault"]:
            return out  # a fault may retire any QP: nothing to conclude after it
        if m["status"]:
            if m["status"] != "success":
                errors.append(step)
            continue
        qp, state = m["qp"], m["state"]
        if m["call"] == "modify" and state == "0" and errors:
            connected.setdefault(qp, step)
        if (m["call"] == "modify" and state == "6" and qp in connected
                and not any(e > connected[qp] for e in errors)):
            out.append(RdmaViolation("stale_retire", (
                f"step {step}: the build moved QP q{qp} to ERR, connected at step "
                f"{connected[qp]} after the error completion of step {errors[0]}, though no "
                f"error completion was delivered since it was connected")))
    return out


def handed_off(posts: list, lo: int, hi: int, slice_size: int = SLICE) -> bool:
    """Whether a slice of the transfer at [lo, hi) was posted through more than one of A's
    NICs (a local RNIC handoff)."""
    devices: dict[int, set[str]] = {}
    for p in posts:
        if lo <= p.laddr < hi and not p.refused:
            devices.setdefault((p.laddr - lo) // slice_size, set()).add(p.dev)
    return any(len(d) > 1 for d in devices.values())


def _poll_lines(polls: list) -> list[str]:
    """The poll log, runs of one QP and status (a QP's receive flushes) as one line each."""
    out: list[str] = []
    i = 0
    while i < len(polls):
        j = i
        while (j + 1 < len(polls) and polls[j + 1].qp == polls[i].qp
               and polls[j + 1].status == polls[i].status):
            j += 1
        x = polls[i]
        if j - i >= 3:
            out.append(f"  polls #{x.n}-#{polls[j].n} qp={x.qp} {j - i + 1} x {x.status} "
                       f"(wr_ids {x.wr_id:#x}..{polls[j].wr_id:#x})")
        else:
            out += [f"  poll #{y.n} qp={y.qp} wr_id={y.wr_id:#x} {y.status} after post "
                    f"#{y.after_post}" for y in polls[i:j + 1]]
        i = j + 1
    return out


def thread_stacks(pid: int, frames: int = 14) -> str:
    """Every thread's stack of process ``pid`` (gdb, batch mode), or why there are none."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "    (no gdb on this host: apt-get install gdb)"
    try:
        done = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex",
                               f"thread apply all bt {frames}"], capture_output=True,
                              text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return "    (gdb took over 120 s)"
    keep = [ln for ln in done.stdout.splitlines() if ln.startswith(("Thread ", "#"))]
    return "\n".join(f"    {ln[:200]}" for ln in keep) or f"    (gdb: {done.stderr.strip()[-300:]})"


def _lacks_scenario(version: str, name: str) -> TargetLacks:
    return TargetLacks(Capability.SCHEDULER, (
        f"{version}: no scenario {name!r} is explored at the verbs boundary of a real build "
        f"(explored: {', '.join(SCENARIOS)})"))


class BoundaryExplorer:
    """``explore``/``replay`` of the mooncake target's RDMA handle on emulated devices."""

    def __init__(self, handle: Any, schedules: int | None, strategy: str | None,
                 replay_token: str | None, seed: int):
        self.handle = handle
        self.schedules = (None if not schedules or schedules == OPTION_DEFAULT
                          else schedules)  # None: each scenario's default budget
        self.strategy = strategy or "mix"
        self.replay_token = replay_token
        self.seed = seed
        self.reports: dict[str, str] = {}

    def _scenario(self, name: str, dedicated_poller: bool) -> ClusterScenario:
        if name not in SCENARIOS:
            raise _lacks_scenario(self.handle.placement.version, name)
        config = {}
        if name == "completion_error_retire_while_posting":
            config["workers_per_ctx"] = 2
        try:
            cluster = self.handle.cluster(dedicated_poller=dedicated_poller, **config)
        except TargetLacks:
            if not config:
                raise
            cluster = self.handle.cluster(dedicated_poller=dedicated_poller)
        memcheck = os.environ.get(MEMCHECK_ENV)
        if memcheck:
            where = Path(memcheck) / f"{name}-{os.getpid()}-{len(self.handle._clusters)}"
            cluster.wrap_launcher = lambda launcher: MemcheckLauncher(launcher, where)
        cluster.add_node("A", ("mlx5_0", "mlx5_1"))
        cluster.add_node("B", ("mlx5_0", "mlx5_1"))
        build = f"mooncake {self.handle.placement.version}" + (
            " dedicated-poller" if dedicated_poller else "")
        scenario = ClusterScenario(name, cluster, build)
        scenario.memcheck = where if memcheck else None
        return scenario

    def _run(self, scenario: ClusterScenario, outcome: ScheduleOutcome,
             schedules: int) -> ExploredRun:
        command = (f"--mc-replay={outcome.token} (same build: "
                   f"{scenario.build})")
        report = outcome.report(command)
        self.reports[outcome.token] = report
        violations = [RdmaViolation(v.split(":", 1)[0] if ":" in v else "violation",
                                    v.split(":", 1)[-1].strip()) for v in outcome.violations]
        violations[0] = RdmaViolation(violations[0].kind, violations[0].detail + "\n" + report)
        return ExploredRun(scenario.name, violations, outcome.token, report, schedules)

    def explore(self, name: str, dedicated_poller: bool = False) -> ExploredResult:
        scenario = self._scenario(name, dedicated_poller)
        start = time.monotonic()
        try:
            if self.replay_token:
                outcome = replay(REFERENCE_STRATEGIES, scenario, self.replay_token)
                failure = self._run(scenario, outcome, 1) if outcome.violations else None
                return ExploredResult(name, 1, 1, time.monotonic() - start, failure)
            budget = self.schedules or SCENARIO_SCHEDULES.get(name, DEFAULT_SCHEDULES)
            result: BoundaryExploration = explore(REFERENCE_STRATEGIES, scenario, budget,
                                                  self.strategy, self.seed)
        finally:
            scenario.cluster.close()
            self.handle._clusters.remove(scenario.cluster)
        failure = (self._run(scenario, result.failure, result.schedules)
                   if result.failure else None)
        return ExploredResult(name, result.schedules, result.distinct, result.seconds, failure,
                              handoffs=scenario.handoffs if name == HANDOFF else None)

    def pinned(self, name: str, dedicated_poller: bool = False) -> ExploredRun:
        """The scenario once, in the RFC's shape pinned at the verbs boundary (``StaleLast``:
        the fault right after the first post, errors first, calls before completions, a
        retired QP's leftovers last), on a fresh engine pair."""
        scenario = self._scenario(name, dedicated_poller)
        try:
            outcome = scenario.run_schedule(StaleLast(), None)
        finally:
            scenario.cluster.close()
            self.handle._clusters.remove(scenario.cluster)
        outcome.params = StaleLast().params()
        outcome.token = token_for(REFERENCE_STRATEGIES, scenario, outcome, {"n": 1})
        if outcome.violations:
            return self._run(scenario, outcome, 1)
        self.reports[outcome.token] = outcome.report()
        return ExploredRun(name, [], outcome.token, self.reports[outcome.token], 1)

    def schedule_trace(self, token: str) -> str:
        return self.reports.get(token, f"(no trace kept for {token[:40]}...)")
