"""The OpLog in a real etcd: fenced commits, group commit, standby reads (in process)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from reference_engine.master.applier import OpLogApplier
from reference_engine.master.election import LeaderElection
from reference_engine.master.error_codes import MasterError
from reference_engine.master.oplog import BatchRecord, OpLogEntry, OpType, encode_payload
from reference_engine.master.oplog_store import Fenced, OpLogInconsistent, OpLogStore
from reference_engine.master.replicated import ReplicatedState
from reference_engine.master.writer import OpLogWriter


@pytest.fixture
def etcd(mc_etcd):
    client = mc_etcd.client()
    yield client
    client.close()


@pytest.fixture
def cluster_id():
    return f"t-{uuid.uuid4().hex[:8]}"


def lead(etcd, cluster_id, address="127.0.0.1:1"):
    session = LeaderElection(etcd, cluster_id, address, ttl=5).try_acquire()
    assert session is not None
    store = OpLogStore(etcd, cluster_id)
    store.claim_producer_view(session.view_version)
    return session, store


def entry(seq, key):
    return OpLogEntry(seq, OpType.PUT_END, key, encode_payload({"size": 1, "replicas": []}))


def test_only_one_candidate_wins_and_the_view_is_the_create_revision(etcd, cluster_id):
    a = LeaderElection(etcd, cluster_id, "a:1", ttl=5)
    b = LeaderElection(etcd, cluster_id, "b:1", ttl=5)
    won = a.try_acquire()
    assert won is not None and b.try_acquire() is None
    view = b.current()
    assert view.address == "a:1" and view.view_version == won.view_version
    won.release()
    assert b.current() is None
    assert b.try_acquire().view_version > won.view_version


def test_commits_extend_the_prefix_and_readers_get_contiguous_batches(etcd, cluster_id):
    session, store = lead(etcd, cluster_id)
    prefix = store.read_prefix()
    assert prefix.raw is None
    for b in range(3):
        rec = BatchRecord(b + 1, 2 * b + 1, (entry(2 * b + 1, f"k{2*b}"), entry(2 * b + 2, f"k{2*b+1}")))
        prefix = store.commit(prefix, rec, session.view_version)
    assert store.read_prefix().prefix.last_seq == 6
    batches = store.read_batches(0, 3)
    state = ReplicatedState()
    applier = OpLogApplier(state)
    for rec in batches:
        for e in rec.entries:
            applier.apply(e)
    assert applier.applied_seq == 6 and sorted(state.objects) == [f"k{i}" for i in range(6)]
    store.trim(1)
    with pytest.raises(OpLogInconsistent, match="expected batch 1"):
        store.read_batches(0, 3)


def test_a_deposed_leader_cannot_append(etcd, cluster_id):
    old, store = lead(etcd, cluster_id, "old:1")
    prefix = store.commit(store.read_prefix(), BatchRecord(1, 1, (entry(1, "a"),)), old.view_version)
    old.release()
    new, _ = lead(etcd, cluster_id, "new:1")
    with pytest.raises(Fenced):
        store.commit(prefix, BatchRecord(2, 2, (entry(2, "stale"),)), old.view_version)
    with pytest.raises(Fenced):
        store.claim_producer_view(old.view_version)
    store.commit(prefix, BatchRecord(2, 2, (entry(2, "fresh"),)), new.view_version)


def test_writer_group_commits_gap_free_and_fails_waiters_when_fenced(etcd, cluster_id):
    session, store = lead(etcd, cluster_id)
    fenced = threading.Event()
    writer = OpLogWriter(store, session.view_version, store.read_prefix(),
                         on_fenced=lambda reason: fenced.set())
    seqs = []

    def work(n):
        for i in range(25):
            seq = writer.append(OpType.PUT_END, f"w{n}-{i}", encode_payload({"size": 1}))
            writer.wait_durable(seq, 10)
            seqs.append(seq)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(seqs) == list(range(1, 101))
    prefix = store.read_prefix().prefix
    assert prefix.last_seq == 100 and prefix.batch_id <= 100
    session.release()
    lead(etcd, cluster_id, "other:1")
    seq = writer.append(OpType.REMOVE, "late")
    with pytest.raises(MasterError):
        writer.wait_durable(seq, 10)
    assert fenced.wait(5)
    writer.stop()


def test_standby_follows_the_state_machine_through_an_etcd_outage(etcd, cluster_id, mc_etcd):
    from reference_engine.master.master_policies import ReplayBaseline
    from reference_engine.master.standby import HotStandby
    from reference_engine.master.standby_state import StandbyState

    session, store = lead(etcd, cluster_id)
    store.commit(store.read_prefix(), BatchRecord(1, 1, (entry(1, "a"),)), session.view_version)
    standby = HotStandby(OpLogStore(mc_etcd.client(timeout=1.0), cluster_id), ReplayBaseline(),
                         poll_interval=3600)
    standby.start()
    try:
        deadline = time.monotonic() + 10
        while standby.machine.state is not StandbyState.WATCHING:
            assert time.monotonic() < deadline, standby.status()
            time.sleep(0.02)
        assert standby.status().applied_seq == 1
        mc_etcd.stop()
        try:
            assert standby.poll_once() is False
            assert standby.machine.state is StandbyState.RECONNECTING
        finally:
            mc_etcd.start()
        deadline = time.monotonic() + 10
        while not standby.poll_once():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert standby.machine.state is StandbyState.WATCHING
        events = [t.event.value for t in standby.machine.history()]
        assert events[-2:] == ["DISCONNECTED", "RECOVERY_SUCCESS"]
    finally:
        standby.stop()
        session.release()


def test_baselines_say_how_they_ended_and_the_standby_acts_on_it(etcd, cluster_id, mc_etcd):
    from reference_engine.master.master_policies import ReplayBaseline, WatchForwardBaseline
    from reference_engine.master.standby import HotStandby
    from reference_engine.master.standby_state import BaselineOutcome, StandbyState

    session, store = lead(etcd, cluster_id)
    store.commit(store.read_prefix(), BatchRecord(1, 1, (entry(1, "a"),)), session.view_version)
    reader = mc_etcd.client(timeout=1.0)
    try:
        for baseline, objects in ((ReplayBaseline(), 1), (WatchForwardBaseline(), 0)):
            standby = HotStandby(OpLogStore(reader, cluster_id), baseline, poll_interval=3600)
            assert baseline.bootstrap(standby) is BaselineOutcome.SYNCED
            assert standby.applier.applied_seq == 1 and len(standby.state.objects) == objects
            assert not standby.baseline_complete, "the standby marks completion, not the strategy"
            assert standby.machine.state is StandbyState.STOPPED and not standby.machine.history()
        stopped = HotStandby(OpLogStore(reader, cluster_id), ReplayBaseline(), poll_interval=3600)
        stopped.stop()
        assert ReplayBaseline().bootstrap(stopped) is BaselineOutcome.STOPPED
        assert stopped.applier.applied_seq == 0
    finally:
        reader.close()
        session.release()


def test_a_caught_up_standby_that_cannot_follow_the_oplog_is_not_promotable(etcd, cluster_id,
                                                                            mc_etcd):
    """MP-3/MP-5: a standby past its baseline whose next batches were trimmed away (it can no
    longer follow the OpLog) answers promotable=false, with that problem as the reason and no
    key count: what it holds is not the primary's index, whatever its state machine says."""
    from pytest_mooncake.waits import wait_until
    from reference_engine.master.master_policies import HonestPromotability, ReplayBaseline
    from reference_engine.master.standby import HotStandby

    session, store = lead(etcd, cluster_id)
    prefix = store.commit(store.read_prefix(), BatchRecord(1, 1, (entry(1, "a"),)),
                          session.view_version)
    reader = mc_etcd.client(timeout=1.0)
    standby = HotStandby(OpLogStore(reader, cluster_id), ReplayBaseline(), poll_interval=3600)
    standby.start()
    try:
        wait_until(lambda: standby.baseline_complete, 10, "the standby to complete its baseline")
        for n, key in ((2, "b"), (3, "c")):
            prefix = store.commit(prefix, BatchRecord(n, n, (entry(n, key),)),
                                  session.view_version)
        assert store.trim(2) == 2
        assert standby.poll_once() is False
        problem = standby.status().problem
        assert problem and "expected batch 2" in problem, standby.status()
        verdict = HonestPromotability().assess(standby)
        assert (verdict.promotable, verdict.reason, verdict.keys_restorable) == (
            False, problem, 0), verdict
    finally:
        standby.stop()
        reader.close()
        session.release()
