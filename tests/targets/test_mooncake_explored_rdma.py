"""Explorations of a real build at its verbs calls (targets/mooncake/explored_rdma.py).

The installed wheel's engines on emulated devices: an exploration of the stale-completion
scenario runs the schedules asked for, each a different order of the build's verbs calls and
completions, and says so; a schedule's token replays, on a fresh engine pair, to the same
sequence of calls; pinned interleavings stay n/a with the reason that real builds are explored;
a scenario the real build has no exploration for is n/a by name. Without the wheel: n/a.
"""

from __future__ import annotations

import re

import pytest

from pytest_mooncake.targets.base import TargetLacks
from pytest_mooncake.targets.mooncake.explored_rdma import (
    FAULT_SCHEDULES,
    HANDOFF,
    BoundaryExplorer,
    handed_off,
    stale_retires,
)
from pytest_mooncake.targets.reference.schedule_strategies import REFERENCE_STRATEGIES as SOURCE
from pytest_mooncake.verbs.boundary_exploration import explore, replay
from pytest_mooncake.verbs.control import PostedWr

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_mooncake_explored_rdma")

SCENARIO = "stale_completion_after_retry"


@pytest.fixture(scope="module")
def rdma(mooncake_target):
    mooncake_target.use_verbs("emulated:mlx5_0,mlx5_1")
    reason = mooncake_target.missing("scheduler")
    if reason:
        pytest.skip(f"n/a: {reason}")
    handle = mooncake_target.rdma(seed=7, schedules=4, strategy="mix")
    try:
        yield handle
    finally:
        handle.close()


def test_an_exploration_runs_its_schedules_and_says_how_many(rdma):
    result = rdma.explore(SCENARIO)
    assert not result.found, result.failure.report
    assert result.schedules_run == 4
    assert "4 schedule(s) at the verbs boundary" in result.summary()


def test_a_schedule_token_replays_to_the_same_verbs_calls(rdma):
    first = rdma.explorer._scenario(SCENARIO, False)
    try:
        explore(SOURCE, first, 3, "mix", seed=11)
        recorded = first.last
    finally:
        first.cluster.close()
    assert recorded.run.steps > 5 and any(":post." in x for x in recorded.run.labels), (
        recorded.run.trace)
    again = rdma.explorer._scenario(SCENARIO, False)
    try:
        replayed = replay(SOURCE, again, recorded.token)
    finally:
        again.cluster.close()
    assert replayed.run.diverged is None, replayed.report()
    assert replayed.run.labels == recorded.run.labels, replayed.report()


def test_the_pinned_interleaving_delivers_the_retired_qps_leftovers_last(rdma):
    """run_interleaving on a real build: once the faulted WR is posted, its error is the first
    completion delivered (every call before any completion, the newest QP's first); the build
    completes the transfer cleanly. A slice the build posted before the faulted one, on a QP of
    its own (0.3.13 sometimes spreads the slices over both NICs, and its thread then sets up
    the second endpoint over TCP, off the verbs calls the scheduler waits on), may complete
    before it: that completion was never held behind the fault."""
    run = rdma.run_interleaving(SCENARIO)
    assert not run.violations, run.report
    trace = run.report.split("verbs-call trace:")[1]
    steps = [(ln.split()[1], ln) for ln in trace.splitlines() if len(ln.split()) > 1]
    error = next((i for i, (label, _) in enumerate(steps) if label.endswith(":retry_exc_err")),
                 None)
    assert error is not None, f"the fault never fired:{trace}"
    wr_id = re.search(r"wr_id=(0x[0-9a-f]+)", steps[error][1]).group(1)
    posted = next(i for i, (label, ln) in enumerate(steps[:error])
                  if ":post." in label and f"wr_id={wr_id} " in ln)
    deliveries = [label for label, _ in steps[posted:] if label.endswith(
        (":success", ":retry_exc_err"))]
    assert deliveries[0].endswith(":retry_exc_err"), trace
    assert len(deliveries) >= 2, trace  # and the retry's own completion


def test_the_handoff_exploration_hands_slices_to_the_other_nic_and_counts_them(rdma):
    """CO-10's exploration: each schedule whose fault fired handed a failed slice from mlx5_0
    to mlx5_1 (A restarts after it, so the next schedule has both NICs again); the summary
    says how many schedules did."""
    result = rdma.explore(HANDOFF)
    assert not result.found, result.failure.report
    assert result.handoffs is not None and result.handoffs >= 1, result.summary()
    assert f"{result.handoffs} with a local NIC handoff" in result.summary()


def test_unknown_scenarios_are_na_with_the_reason(rdma):
    with pytest.raises(TargetLacks, match="no scenario 'no_such'"):
        rdma.explore("no_such")
    assert SCENARIO in rdma.scenarios()


RETRIED = ["p0.t0:post.q0", "p0.c0.0:retry_exc_err", "p0.t1:poll", "p0.t1:modify.q0.s6",
           "p0.t1:modify.q1.s6", "p0.t0:modify.q2.s0", "p0.t0:modify.q2.s3", "p0.t0:post.q2"]


def test_a_new_generation_retired_without_a_newer_error_is_a_stale_retire():
    """CO-5 from a schedule's labels: q2 was connected after q0's error; retiring q2 with no
    error delivered since is what a stale completion would cause; after an error of the new
    generation, or after a fault the test injected, it is not."""
    assert stale_retires(RETRIED + ["p0.c2.0:success", "p0.t1:poll"]) == []
    (found,) = stale_retires(RETRIED + ["p0.t1:modify.q2.s6"])
    assert found.kind == "stale_retire" and "q2" in found.detail
    assert stale_retires(RETRIED + ["p0.c2.0:retry_exc_err", "p0.t1:modify.q2.s6"]) == []
    assert stale_retires(RETRIED[:3] + ["fault:qp_fatal"] + RETRIED[3:]
                         + ["p0.t1:modify.q2.s6"]) == []


def post(n: int, dev: str, laddr: int, refused: int = 0) -> PostedWr:
    return PostedWr(n, 256 + n, dev, 1, n, "write", laddr, 4096, 0, 0, 1, "rts", refused)


def test_a_handoff_is_one_slice_posted_through_two_nics():
    base = 0x7F0000000000
    assert handed_off([post(1, "mlx5_0", base + 4096), post(2, "mlx5_1", base + 4096)],
                      base, base + 8192)
    # two slices on two NICs, each on one: no handoff; a refused post moved nothing
    assert not handed_off([post(1, "mlx5_0", base), post(2, "mlx5_1", base + 4096)],
                          base, base + 8192)
    assert not handed_off([post(1, "mlx5_0", base, refused=1), post(2, "mlx5_1", base)],
                          base, base + 8192)
    # a WR of another transfer (outside [lo, hi)) does not count
    assert not handed_off([post(1, "mlx5_0", base + 8192), post(2, "mlx5_1", base)],
                          base, base + 8192)


def test_the_fault_scenarios_default_to_their_own_budget():
    """--mc-schedules left at its default: the scenarios whose fault the strategy places run
    FAULT_SCHEDULES, the others the boundary's default; a number given is used for all."""
    assert BoundaryExplorer(None, 200, None, None, 1).schedules is None
    assert BoundaryExplorer(None, None, None, None, 1).schedules is None
    assert BoundaryExplorer(None, 7, None, None, 1).schedules == 7
    assert FAULT_SCHEDULES > 40


def test_a_qp_fatal_in_a_schedule_leaves_every_event_read_to_the_strategy(rdma):
    """The exploration's QP-fatal is applied from the scheduler's own thread, and A's event
    thread reads each event only when the strategy grants that read. A fault that waited there
    for the build's acknowledgement could end only when the park timeout let the thread go on
    alone: a step no strategy chose, and 10 s per QP."""
    scenario = rdma.explorer._scenario("qp_fatal_races_completion", False)
    outcomes = []
    run_schedule = scenario.run_schedule

    def recording(strategy, labels):
        outcomes.append(run_schedule(strategy, labels))
        return outcomes[-1]

    scenario.run_schedule = recording
    try:
        explore(SOURCE, scenario, 6, "mix", seed=11)
    finally:
        scenario.cluster.close()

    fired = [o for o in outcomes if "fault:qp_fatal" in o.run.labels]
    read = [o for o in fired if any(":event" in label for label in
                                    o.run.labels[o.run.labels.index("fault:qp_fatal") + 1:])]
    assert read, (f"precondition: in none of {len(outcomes)} schedules did the fault hit a live "
                  f"QP whose event A's event thread then read")
    for outcome in fired:
        assert outcome.run.timeouts == 0, outcome.report()


def test_every_handoff_schedule_hands_a_slice_to_the_other_nic(rdma):
    """The device-fatal of the handoff scenario kills the NIC the schedule's first WR went
    through, whichever the build picked, so every schedule drives CO-10's story (naming
    ``mlx5_0`` left 0.3.14's schedules that posted only through ``mlx5_1`` without a handoff:
    0 of 40 with seed 1101)."""
    result = rdma.explore(HANDOFF)
    assert not result.found, result.failure.violations
    assert result.handoffs == result.schedules_run == 4, result.summary()


class _Posts:
    def __init__(self, posts):
        self._posts = posts

    def posts(self, since=0):
        return [p for p in self._posts if p.n > since]


class _Cluster:
    """What the handoff scenario's arming and fault call: A's post log, an injected error per
    slice, device_fatal."""

    def __init__(self, posts):
        self.nodes = {"A": type("Node", (), {"ctl": _Posts(posts)})()}
        self.killed: list[tuple[str, str]] = []

    def inject_error(self, transfer, index, status):
        pass

    def device_fatal(self, node, nic):
        self.killed.append((node, nic))


def test_the_handoff_fault_is_ready_after_the_first_post_and_kills_its_nic():
    from pytest_mooncake.targets.mooncake.explored_rdma import ClusterScenario
    cluster = _Cluster([post(1, "mlx5_1", 0, refused=1), post(2, "mlx5_1", 0),
                        post(3, "mlx5_0", 4096)])
    scenario = ClusterScenario(HANDOFF, cluster, "build")
    scenario.cursor = 3  # nothing posted in this schedule yet
    fault = scenario._arm(0)["device_fatal"]
    assert not fault.ready()
    scenario.cursor = 0  # the schedule's first accepted WR went through mlx5_1
    assert fault.ready()
    fault()
    assert cluster.killed == [("A", "mlx5_1")] and scenario.fatal
