"""The OpLog in a real Redis, laid out as Mooncake's Redis OpLog backend keeps it: fenced
commits (producer view and the leader hash's view), contiguous reads through the lexicographic
index, trims, and a standby that follows it through a Redis outage."""

from __future__ import annotations

import uuid

import pytest

from pytest_mooncake.waits import wait_until
from reference_engine.master.applier import OpLogApplier
from reference_engine.master.oplog import BatchRecord, OpLogEntry, OpType, encode_payload
from reference_engine.master.oplog_store import Fenced, OpLogInconsistent
from reference_engine.master.redis_client import connect
from reference_engine.master.redis_election import RedisLeaderElection
from reference_engine.master.redis_oplog_store import RedisOpLogStore
from reference_engine.master.replicated import ReplicatedState


@pytest.fixture
def redis(mc_redis):
    client = connect(mc_redis.address, timeout=1.0)
    yield client
    client.close()


@pytest.fixture
def cluster_id(mc_redis):
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    client = mc_redis.client()
    for key in client.scan_iter(match="mooncake-store/{" + name + "}/*"):
        client.delete(key)
    client.close()


@pytest.fixture
def lead(redis, cluster_id):
    """``lead(address)``: win the election and claim the producer view -> (session, store)."""
    def win(address: str = "127.0.0.1:1"):
        session = RedisLeaderElection(redis, cluster_id, address, ttl=5).try_acquire()
        assert session is not None, f"{address} did not win the election of {cluster_id}"
        store = RedisOpLogStore(redis, cluster_id)
        store.claim_producer_view(session.view_version)
        return session, store
    return win


def batch(batch_id: int, *keys: str, first: int | None = None) -> BatchRecord:
    """Batch ``batch_id`` putting ``keys`` from sequence ``first`` (default ``batch_id``)."""
    first = batch_id if first is None else first
    payload = encode_payload({"size": 1, "replicas": []})
    return BatchRecord(batch_id, first, tuple(OpLogEntry(first + i, OpType.PUT_END, key, payload)
                                              for i, key in enumerate(keys)))


def test_records_live_at_mooncakes_keys_with_a_lexicographic_index(redis, cluster_id, lead):
    session, store = lead()
    prefix = store.commit(store.read_prefix(), batch(1, "a"),
                          session.view_version)
    tag = "mooncake-store/{" + cluster_id + "}"
    assert redis.get(f"{tag}/oplog/batches/{1:020d}") == batch(1, "a").encode()
    assert redis.get(f"{tag}/oplog/durable_prefix") == prefix.raw
    assert redis.get(f"{tag}/oplog/producer_view") == str(session.view_version).encode()
    assert set(redis.zrange(f"{tag}/oplog-index", 0, -1)) == {
        f"/oplog/{cluster_id}/batches/{1:020d}".encode(),
        f"/oplog/{cluster_id}/durable_prefix".encode(),
        f"/oplog/{cluster_id}/producer_view".encode()}
    session.release()


def test_commits_extend_the_prefix_and_readers_get_contiguous_batches(redis, cluster_id, lead):
    session, store = lead()
    prefix = store.read_prefix()
    assert prefix.raw is None
    for b in range(12):
        rec = batch(b + 1, f"k{b}")
        prefix = store.commit(prefix, rec, session.view_version)
    assert store.read_prefix().prefix.last_seq == 12
    assert [r.batch_id for r in store.read_batches(2, 12, limit=5)] == [3, 4, 5, 6, 7]
    state = ReplicatedState()
    applier = OpLogApplier(state)
    for rec in store.read_batches(0, 12):
        for e in rec.entries:
            applier.apply(e)
    assert applier.applied_seq == 12 and sorted(state.objects) == sorted(f"k{i}" for i in range(12))
    with pytest.raises(Fenced):  # a commit that does not extend what Redis holds
        store.commit(store.read_prefix().__class__(prefix.prefix, b"stale"),
                     batch(13, "x"), session.view_version)
    assert store.trim(10) == 10
    with pytest.raises(OpLogInconsistent, match="expected batch 1"):
        store.read_batches(0, 12)
    assert [r.batch_id for r in store.read_batches(10, 12)] == [11, 12]
    session.release()


def test_a_deposed_leader_cannot_append(redis, cluster_id, lead):
    old, store = lead("old:1")
    prefix = store.commit(store.read_prefix(), batch(1, "a"),
                          old.view_version)
    old.release()
    # the lease is gone and nobody claimed the producer view yet: the leader hash fences it
    with pytest.raises(Fenced):
        store.commit(prefix, batch(2, "stale"), old.view_version)
    new, _ = lead("new:1")
    with pytest.raises(Fenced):
        store.commit(prefix, batch(2, "stale"), old.view_version)
    with pytest.raises(Fenced, match="newer than ours"):
        store.claim_producer_view(old.view_version)
    store.commit(prefix, batch(2, "fresh"), new.view_version)
    assert [e.object_key for r in store.read_batches(0, 2) for e in r.entries] == ["a", "fresh"]
    new.release()


def test_standby_follows_the_oplog_through_a_cut_from_redis(cluster_id, mc_redis, mc_faults,
                                                           lead):
    """The standby's Redis traffic is refused (a proxy disabled, not a Redis restart: a
    redis-server without persistence comes back empty): a failed poll is a disconnection, the
    next good one a recovery."""
    from reference_engine.master.master_policies import ReplayBaseline
    from reference_engine.master.standby import HotStandby
    from reference_engine.master.standby_state import StandbyState

    session, store = lead()
    store.commit(store.read_prefix(), batch(1, "a"), session.view_version)
    proxy, via = mc_faults.proxy("standby-redis", mc_redis.address)
    reader = connect(via, 1.0)
    standby = HotStandby(RedisOpLogStore(reader, cluster_id), ReplayBaseline(), poll_interval=3600)
    standby.start()
    try:
        wait_until(lambda: standby.machine.state is StandbyState.WATCHING, 10,
                   "the standby to replay the OpLog and watch it")
        assert standby.status().applied_seq == 1
        proxy.disable()
        try:
            assert standby.poll_once() is False
            assert standby.machine.state is StandbyState.RECONNECTING
        finally:
            proxy.enable()
        store.commit(store.read_prefix(), batch(2, "b"), session.view_version)
        wait_until(standby.poll_once, 10, "a poll through the healed proxy", interval=0.1)
        assert standby.machine.state is StandbyState.WATCHING
        assert standby.status().applied_seq == 2
        events = [t.event.value for t in standby.machine.history()]
        assert events[-2:] == ["DISCONNECTED", "RECOVERY_SUCCESS"]
    finally:
        standby.stop()
        reader.close()
        session.release()


def test_the_master_takes_etcd_or_redis_and_names_a_bad_redis_address(capsys):
    from reference_engine.master.master_main import parser

    args = parser().parse_args(["--redis", "redis://127.0.0.1:6390", "--cluster-id", "c"])
    assert (args.redis, args.etcd) == ("127.0.0.1:6390", None)
    for argv, said in ((["--redis", "127.0.0.1", "--cluster-id", "c"],
                        "redis address '127.0.0.1': expected host:port or redis://host:port"),
                       (["--redis", "h:1", "--etcd", "h:2", "--cluster-id", "c"],
                        "not allowed with argument"),
                       (["--cluster-id", "c"], "one of the arguments --etcd --redis is required")):
        with pytest.raises(SystemExit):
            parser().parse_args(argv)
        assert said in capsys.readouterr().err
