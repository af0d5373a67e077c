"""A bounded soak: free-running worker threads with faults injected while transfers run.

Nothing may deadlock: every transfer ends, every thread stops, retired endpoints are reclaimed
and the CO-9 end-state invariants hold (rfc). The fault mix includes one device-fatal event on
one of the sender's NICs and one on a receiver's NIC, at a seeded round: the dead context's
endpoints are retired (CO-6) and drained, its work is handed off, nothing leaks."""

import random
import time

import pytest

from reference_engine.rdma.sim.invariants import InvariantChecker
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.sim.sim_verbs import ERROR, FAIL_POST, HOLD, Fault
from reference_engine.rdma.verbs import Opcode, WcStatus

ERRORS = [WcStatus.REM_ACCESS_ERR, WcStatus.RETRY_EXC_ERR, WcStatus.LOC_PROT_ERR,
          WcStatus.GENERAL_ERR, WcStatus.REM_OP_ERR]


def _wait(pred, timeout):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


@pytest.mark.parametrize("env", [{}, {"MC_RDMA_DEDICATED_POLLER": "1"}],
                         ids=["shared", "dedicated"])
def test_free_running_soak_with_faults_finishes(env, mc_seed):
    rng = random.Random(mc_seed)
    checker = InvariantChecker()
    cluster = SimCluster("rfc", env=env, observer=checker, slice_size=4096,
                         destroy_timeout=0.2, workers_per_ctx=2, rail_pause_seconds=0.01)
    a = cluster.add_node("A", ["n0", "n1"], buffer_len=1 << 20)
    targets = [cluster.add_node(name, ["n0", "n1"], buffer_len=1 << 20) for name in "BC"]
    fabric = cluster.fabric
    a.write(0, bytes(rng.randrange(256) for _ in range(1 << 16)))
    local_fatal = (rng.randrange(10, 50), rng.choice(["n0", "n1"]))
    peer_fatal = (rng.randrange(10, 50), rng.choice(targets), rng.choice(["n0", "n1"]))
    cluster.start()
    tasks = []
    try:
        for round_ in range(60):
            peer = rng.choice(targets)
            off = rng.randrange(0, 1 << 19, 4096)
            task = a.transport.submit(peer.name, [(Opcode.RDMA_WRITE, a.buffer_addr + off,
                                                   rng.randrange(1, 9) * 4096,
                                                   peer.buffer_addr + off)])
            checker.track(task.slices)
            tasks.append(task)
            fault = rng.randrange(8)
            if fault == 0:
                fabric.inject(Fault(ERROR, status=rng.choice(ERRORS), times=rng.randrange(1, 4)))
            elif fault == 1:
                fabric.inject(Fault(FAIL_POST, times=1))
            elif fault == 2:
                with fabric.lock:
                    qps = [qp for ctx in a.node.contexts.values() for qp in ctx.qps]
                if qps:
                    fabric.raise_qp_fatal(rng.choice(qps))
            elif fault == 3:
                fabric.inject(Fault(HOLD, tag=f"h{round_}", times=2))
            elif fault == 4:
                fabric.release(f"h{round_ - rng.randrange(1, 4)}")
            elif fault == 5 and round_ % 20 == 5:
                fabric.change_gid(a.node.open(rng.choice(["n0", "n1"])), f"fe80::{round_}")
            if round_ == local_fatal[0]:
                fabric.raise_device_fatal(a.node.open(local_fatal[1]))
            if round_ == peer_fatal[0]:
                fabric.raise_device_fatal(peer_fatal[1].node.open(peer_fatal[2]))
            time.sleep(rng.random() * 0.002)
        fabric.disarm()  # an armed HOLD would catch a later retry after the release below
        for tag in list(fabric.held):
            fabric.release(tag)
        assert _wait(lambda: all(t.done for t in tasks), 60), (
            f"{sum(not t.done for t in tasks)} transfers never ended")
        assert _wait(lambda: all(not c.store.waiting for c in a.transport.contexts), 30), (
            "retired endpoints were never reclaimed")
    finally:
        fabric.disarm()
        for tag in list(fabric.held):
            fabric.release(tag)
        stopped = cluster.stop(timeout=10)
    assert stopped, "a worker thread did not stop"
    violations = checker.check_final()
    assert violations == [], [str(v) for v in violations[:5]]
    dead = next(c for c in a.transport.contexts if c.device_name == local_fatal[1])
    assert not dead.active, f"A's {local_fatal[1]} went device-fatal and stayed active"
    assert not dead.store.endpoints(), (
        f"endpoints left in the active map of A's dead {local_fatal[1]}: {dead.store.endpoints()}")
    assert a.transport.stats["async_events"] >= 1, "the device-fatal event was never handled"
    leaks = {c.device_name: c.cq_outstanding() for c in a.transport.contexts if c.cq_outstanding()}
    assert not leaks, f"CQ outstanding left at the end: {leaks}"
    assert a.transport.ownership.outstanding() == 0, "completion tokens left live at the end"
    completed = sum(t.status() == "COMPLETED" for t in tasks)
    print(f"soak: {completed}/{len(tasks)} transfers completed, stats {dict(a.transport.stats)}")
    assert completed > len(tasks) // 2


def test_legacy_free_running_soak_never_deadlocks(mc_seed):
    """Legacy may strand or double-complete slices; its threads must still stop."""
    rng = random.Random(mc_seed)
    cluster = SimCluster("legacy", slice_size=4096, destroy_timeout=0.05,
                         rail_pause_seconds=0.01)
    a = cluster.add_node("A", ["n0", "n1"])
    b = cluster.add_node("B", ["n0", "n1"])
    local_fatal = (rng.randrange(5, 35), rng.choice(["n0", "n1"]))
    cluster.start()
    try:
        for round_ in range(40):
            a.transport.submit("B", [(Opcode.RDMA_WRITE, a.buffer_addr, 4 * 4096, b.buffer_addr)])
            if round_ == local_fatal[0]:
                cluster.fabric.raise_device_fatal(a.node.open(local_fatal[1]))
            if rng.random() < 0.3:
                cluster.fabric.inject(Fault(ERROR, status=rng.choice(ERRORS)))
            if rng.random() < 0.1:
                with cluster.fabric.lock:
                    qps = [qp for ctx in a.node.contexts.values() for qp in ctx.qps]
                if qps:
                    cluster.fabric.raise_qp_fatal(rng.choice(qps))
            time.sleep(0.001)
    finally:
        assert cluster.stop(timeout=10), "a legacy worker thread did not stop"


def test_free_running_transfers_survive_repeated_peer_restarts(mc_seed):
    """MR-13/MR-16 on the RDMA path: lookups, forced refreshes and replacement cleanup run on
    worker threads while the peer restarts under the same name; nothing deadlocks or leaks."""
    rng = random.Random(mc_seed)
    checker = InvariantChecker()
    cluster = SimCluster("rfc", observer=checker, slice_size=4096, destroy_timeout=0.2,
                         rail_pause_seconds=0.01)
    a = cluster.add_node("A", ["n0", "n1"])
    cluster.add_node("B", ["n0", "n1"])
    cluster.start()
    tasks = []
    try:
        for round_ in range(30):
            peer = cluster.peers["B"]
            task = a.transport.submit("B", [(Opcode.RDMA_WRITE, a.buffer_addr, 4 * 4096,
                                             peer.buffer_addr + 4096 * (round_ % 8))])
            checker.track(task.slices)
            tasks.append(task)
            if round_ % 6 == 5:
                cluster.restart_node("B").transport.start()
            time.sleep(rng.random() * 0.003)
        assert _wait(lambda: all(t.done for t in tasks), 60), "a transfer never ended"
        assert _wait(lambda: all(not c.store.waiting for c in a.transport.contexts), 30)
    finally:
        assert cluster.stop(timeout=10), "a worker thread did not stop"
    assert a.transport.stats["replacements"] >= 1
    assert checker.check_final() == []
    assert sum(t.status() == "COMPLETED" for t in tasks) >= len(tasks) - 6
