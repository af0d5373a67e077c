"""The starvation-aware deadline (runtime/cpu_starvation.py): a wait stretches by the time the
watched threads sat runnable without a CPU, a stuck build with the CPU still ends at its own
deadline, and a wait that never had that time says so. The clock and the schedstat readings
are given (a unit test of one class); ``schedstat`` itself reads this real process."""

from __future__ import annotations

import os
import threading

from pytest_mooncake.report.failure_vocabulary import symptom_of
from pytest_mooncake.runtime.cpu_starvation import StarvedDeadline, schedstat


class Machine:
    """A wall clock and each process's one thread's (ran, waited) seconds, advanced by the
    test; pid 7 is the build, pid 8 the harness."""

    def __init__(self) -> None:
        self.now = 0.0
        self.threads = {7: [0.0, 0.0], 8: [0.0, 0.0]}

    def clock(self) -> float:
        return self.now

    def sample(self, pids):
        return {(pid, pid): tuple(self.threads[pid]) for pid in pids}

    def advance(self, wall: float, pid: int = 7, ran: float = 0.0, waited: float = 0.0) -> None:
        self.now += wall
        self.threads[pid][0] += ran
        self.threads[pid][1] += waited


def deadline(machine: Machine, timeout: float = 60.0) -> StarvedDeadline:
    return StarvedDeadline(timeout, (7, 8), {7: "A", 8: "the harness"}, ours=(8,),
                           clock=machine.clock, sample=machine.sample)


def test_a_stuck_build_that_had_the_cpu_ends_at_its_own_deadline_and_is_judged() -> None:
    """The deadlock case: the build's threads sleep (not runnable), nothing is starved."""
    m = Machine()
    d = deadline(m)
    m.advance(59.0, ran=0.5)
    assert not d.expired()
    m.advance(1.0)
    assert d.expired()
    assert not d.starved_out()
    assert "waited runnable for a CPU was 0.0s" in d.describe()
    assert "A 0.5s" in d.describe()


def test_a_stuck_build_whose_poller_spins_under_load_is_judged_once_it_ran() -> None:
    """0.3.13.post1's deadlock beside a spinning poller on a loaded machine: the poller is
    starved too, but it ran PROGRESS_CPU seconds, so every ready thread had its turn."""
    m = Machine()
    d = deadline(m)
    m.advance(59.0, ran=19.0, waited=40.0)
    assert not d.expired()
    m.advance(1.0, ran=0.3, waited=0.7)
    assert d.expired() and not d.starved_out()
    assert "the busiest thread of the build ran 19.3s" in d.describe()


def test_a_starved_build_gets_its_deadline_in_time_it_could_run() -> None:
    """60 s of wall clock of which 50 s runnable without a CPU is 10 s of the build's time."""
    m = Machine()
    d = deadline(m)
    m.advance(60.0, ran=2.0, waited=50.0)
    assert not d.expired()
    m.advance(49.0, ran=1.0)
    assert not d.expired()
    m.advance(1.0)
    assert d.expired() and not d.starved_out()


def test_a_wait_the_cap_ends_while_starved_is_not_a_verdict() -> None:
    m = Machine()
    d = deadline(m)
    m.advance(120.0, ran=2.0, waited=118.0)
    m.advance(0.0, pid=8, ran=60.0)  # the harness's own CPU is no progress of the build
    m.advance(119.0, ran=2.0, waited=117.0)
    assert not d.expired()
    m.advance(1.0, waited=1.0)
    assert d.expired()
    assert d.starved_out()
    assert "in 240.0s (deadline 60s of CPU-available time, cap 240s)" in d.describe()


def test_refresh_reads_the_threads_before_the_deadline_is_due() -> None:
    """A wedge judged at 12 s (explored_rdma.py) asks how starved the build was so far:
    ``expired`` reads nothing before its deadline, ``refresh`` does."""
    m = Machine()
    d = deadline(m)
    m.advance(12.0, ran=0.5, waited=3.0)
    assert not d.expired() and d.starved() == 0.0  # not read yet
    assert d.refresh().starved() == 3.0 and d.elapsed() == 12.0
    assert "in 12.0s" in d.describe() and "A 0.5s" in d.describe()
    wedged = ("stuck_slice: transfer 3 (write 8192 bytes A->B) never ended: " + d.describe()
              + "; wedged: thread 11 has waited 10.0 s in ibv_destroy_qp of QP 280 for 1 async "
                "event(s) read by thread 12 to be acknowledged")
    assert symptom_of(wedged) is None, "the wedge message says what it measured"
    assert d.thread(7, 7) == (0.5, 3.0) and d.thread(7, 99) == (0.0, 0.0)


def test_the_new_stuck_slice_message_is_a_finding_and_the_old_one_a_symptom() -> None:
    m = Machine()
    d = deadline(m)
    m.advance(60.0, ran=0.2)
    d.expired()
    old = "Failed: schedule 69 broke CO-9: stuck_slice: transfer 68 (write 8192 bytes A->B) never ended"
    assert symptom_of(old).name == "unmeasured-deadline"
    assert symptom_of(f"{old}: {d.describe()}") is None
    assert symptom_of("MasterError: client c1: no master attached within 10.0s (refused)"
                      ).name == "unmeasured-deadline"
    assert symptom_of("AssertionError: precondition: put k3 failed on the healthy leader: "
                      "{'ok': False, 'error': 'put returned rc=-705'}").name == "unmeasured-deadline"


def test_schedstat_reads_every_thread_of_a_live_process() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    try:
        seen = schedstat([os.getpid()])
        assert (os.getpid(), thread.native_id) in seen, seen
        assert all(ran >= 0 and waited >= 0 for ran, waited in seen.values())
    finally:
        release.set()
        thread.join()
    assert schedstat([2**22 + 1]) == {}  # no such process: nothing, not an error
