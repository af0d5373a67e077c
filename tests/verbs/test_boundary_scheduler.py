"""The scheduler at the verbs boundary (issue #25) on a build-shaped program: a planted
stale-completion defect is found within the default number of schedules and its token replays
to the same failure; the fixed program passes; a parked call nobody grants goes on alone; a
destroy no acknowledgement can release stops its schedule as wedged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from stale_program import build_program, scenario

from pytest_mooncake.targets.reference.schedule_strategies import REFERENCE_STRATEGIES as SOURCE
from pytest_mooncake.verbs import EmulatedFabric
from pytest_mooncake.verbs.boundary_exploration import (
    DEFAULT_SCHEDULES,
    TokenError,
    explore,
    replay,
)
from pytest_mooncake.verbs.points import SchedulingPoints

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("verbs/test_boundary_scheduler")

SEED = 20261202


@pytest.fixture(scope="module")
def program():
    return build_program()


@pytest.fixture
def one_device(tmp_path_factory):
    with EmulatedFabric.create("mlx5_0", run_dir=tmp_path_factory.mktemp("vs"), seed=SEED) as f:
        yield f


@pytest.mark.parametrize("strategy", ["mix", "pct", "random"])
def test_reused_wr_id_fails_and_the_token_replays_the_failure(one_device, program, strategy):
    sc = scenario(one_device, "reuse", program)
    found = explore(SOURCE, sc, DEFAULT_SCHEDULES, strategy, SEED)
    assert found.failure is not None, found.summary()
    failure = found.failure
    assert "stale completion" in failure.violations[0], failure.report()
    assert any(":post.q1" in label for label in failure.run.labels), failure.report()

    again = replay(SOURCE, sc, failure.token)
    assert again.run.labels == failure.run.labels, again.report()
    assert again.violations and "stale completion" in again.violations[0], again.report()


def test_tagged_wr_ids_pass_every_schedule(one_device, program):
    """The same program with the attempt in its wr_id drops the stale completion: no schedule
    violates, and the schedules differ (the scheduler did reorder the calls)."""
    sc = scenario(one_device, "tagged", program)
    result = explore(SOURCE, sc, DEFAULT_SCHEDULES, "mix", SEED)
    assert result.failure is None, result.failure.report()
    assert result.schedules == DEFAULT_SCHEDULES
    assert result.distinct > 3, result.summary()


def test_a_token_of_another_build_is_refused(one_device, program):
    bad = scenario(one_device, "reuse", program)
    found = explore(SOURCE, bad, DEFAULT_SCHEDULES, "mix", SEED)
    assert found.failure is not None
    with pytest.raises(TokenError, match="recorded against"):
        replay(SOURCE, scenario(one_device, "tagged", program), found.failure.token)


def test_a_parked_call_nobody_grants_goes_on_alone_and_is_counted(one_device, program):
    """The bounded wait: with no controller answering, each of the worker's three calls (post,
    retire, post) goes on alone after park_ms, counted; the completions stay held until the
    points go off, and then the program finishes normally."""
    proc = subprocess.Popen([str(program), "mlx5_0", "tagged"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=one_device.apply())
    try:
        assert proc.stdout.readline().startswith("ready")
        points = SchedulingPoints(one_device.control(proc.pid))
        points.on(park_ms=200)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        first = points.wait_quiet(20_000, timeout=30)
        assert [c.point for c in first.parked] == ["post"], first
        alone = points.wait_quiet(1_000_000, timeout=60)
        assert (alone.timeouts, len(alone.parked), len(alone.held)) == (3, 0, 2), alone
        assert points.off() == 2
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[-1] == "done" and lines[1].startswith("final"), lines
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_log_says_where_it_stands_without_being_read(one_device, program):
    """``logged`` gives the n of a log's last entry (what a schedule reads its new entries
    after), and ``since`` reads only the entries after it: the program's two posts and the
    completions it polled."""
    proc = subprocess.Popen([str(program), "mlx5_0", "tagged"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=one_device.apply())
    try:
        assert proc.stdout.readline().startswith("ready")
        ctl = one_device.control(proc.pid)
        assert (ctl.logged("posts"), ctl.logged("polls")) == (0, 0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[-1] == "done", lines
        posts, polls = ctl.posts(), SchedulingPoints(ctl).polls()
        assert len(posts) == 2 and polls, (posts, polls)
        assert ctl.logged("posts") == posts[-1].n == 2
        assert ctl.logged("polls") == polls[-1].n == len(polls)
        assert ctl.posts(since=1) == posts[1:]
        assert SchedulingPoints(ctl).polls(since=polls[-1].n) == []
        with pytest.raises(ValueError, match="one of posts, polls"):
            ctl.logged("held")
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


WEDGE_SOURCE = Path(__file__).with_name("destroy_vs_event.c")


class FirstEnabled:
    """The smallest strategy: always the first runnable action."""

    def reset(self, slots):
        pass

    def pick(self, slots, step):
        return 0


def run_destroy_vs_event(device, mode: str):
    from pytest_mooncake.runtime.native import build_executable
    from pytest_mooncake.verbs import library_path
    from pytest_mooncake.verbs.boundary_scheduler import BoundaryScheduler
    lib = library_path()
    exe = build_executable("destroy_vs_event", [WEDGE_SOURCE], cflags=["-pthread"],
                           ldflags=[f"-L{lib.parent}", "-l:libibverbs.so.1"])
    proc = subprocess.Popen([str(exe), "mlx5_0", mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=device.apply())
    try:
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["ready"], ready
        qpn = int(ready[1].split("=")[1])
        ctl = device.control(proc.pid)
        points = SchedulingPoints(ctl)
        points.on()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        ctl.request(f"event type=qp_fatal qp={qpn}")
        # stall_s far above ack_stall_s: a stop at the stall bound would not say "wedged"
        run = BoundaryScheduler([points], quiet_us=3000, stall_s=120, ack_stall_s=1).run(
            FirstEnabled(), lambda: proc.poll() is not None)
        return qpn, proc, run
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_destroy_waiting_for_an_ack_nobody_can_give_stops_the_schedule_as_wedged(one_device):
    """The destroy-vs-event deadlock: the schedule stops at the ack bound, not the stall bound,
    naming the destroying thread, the QP, the unacknowledged event and the thread that read it."""
    qpn, proc, run = run_destroy_vs_event(one_device, "locked")
    assert run.wedged, run
    (wait,) = run.wedged
    assert (wait.what, wait.qp, wait.unacked) == ("qp", qpn, 1), wait
    assert wait.reader and wait.reader != wait.tid and wait.ctx_reader == wait.reader, wait
    assert run.stopped.startswith("nothing runnable") and f"QP {qpn}" in run.stopped, run.stopped
    assert "1 async event(s) read by thread" in run.stopped, run.stopped
    assert [label.split(":")[1].split(".")[0] for label in run.labels] == ["event", "destroy"]


def test_a_destroy_whose_event_is_acknowledged_is_not_wedged(one_device):
    qpn, proc, run = run_destroy_vs_event(one_device, "unlocked")
    assert proc.returncode == 0 and not run.wedged and run.stopped is None, run
