"""MP-1..MP-6, MP-9: promotion safety of HA masters (the master RFC's scenarios: a soaked standby
that survives a leader crash, a fresh standby with no baseline, a soaked standby with one bad
memory descriptor, snapshot restore).

Each scenario is judged first by what a user of the cluster sees (which keys the master that
serves after a failover holds); the promotability predicate is asked only where a requirement
is about it: MP-3 and MP-5 demand it (``mc_demands``: a build without one FAILs them), MP-1 and
MP-4 use it as a means for a second look (``mc_requires``: n/a where the build has none)."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest

from pytest_mooncake.acknowledged_puts import put_fresh
from pytest_mooncake.targets import Capability, ObservationFailed, TargetLacks
from pytest_mooncake.waits import Timeout, wait_until

WAIT = 20.0
KEYS = 40
SETTLE = 10.0
"""How long a new leader's key list may take to fill after it serves: its store clients
remount their segments on their next heartbeats (0.3.13 lists an object only once the segment
holding its replica is mounted again). Ended early by that event: once the writer's segment
is mounted on the new leader, two equal key lists read after it are the list (``settled``);
a target that cannot say where a segment is mounted waits SETTLE, as before."""

pytestmark = pytest.mark.mc_requires("master_cluster")


def put_keys(client, n: int, prefix: str = "k") -> list[str]:
    keys = [f"{prefix}{i}" for i in range(n)]
    for key in keys:
        result = put_fresh(client, key, 64)
        assert result["ok"], f"precondition: put {key} failed on the healthy leader: {result}"
    return keys


def only_standby(cluster) -> int:
    """The one standby beside the leader (a precondition, said as one when it does not hold)."""
    standbys = cluster.standbys()
    assert len(standbys) == 1, (
        f"precondition: one standby beside the leader, but the cluster reports standbys "
        f"{standbys}")
    return standbys[0]


def soaked(cluster, keys: int = KEYS) -> tuple[list[str], int, int, str | None]:
    """A leader and a standby that ran before the data was written, given WAIT to apply all of
    it (seen from the standby's applied OpLog sequence against the leader's durable one).
    The last value says what the standby reported when it did not catch up in time (None when
    it did): a deployment whose standbys follow nothing (``--enable_oplog`` off) never catches
    up, and the failover that follows is judged by what the new leader serves."""
    written = put_keys(cluster.client(0), keys)
    leader = cluster.leader()
    standby = only_standby(cluster)
    return written, leader, standby, behind(cluster, standby, f"{keys} acknowledged puts")


NO_OPLOG: dict[tuple[str, str], str] = {}
"""Deployments whose leader was seen keeping no OpLog in this session (this worker's): the
deployment (build, master flags and env as ``deployed()`` gives them) -> what that probe saw,
with the test that saw it. A later test needing a following standby of the same deployment
is n/a at once, citing that probe, instead of waiting WAIT again for the same answer."""


def deployment_key(cluster) -> tuple[str, str]:
    """The build (a real build's version; the class of a cluster that names none, e.g. the
    reference's) and the master flags and environment it was deployed with."""
    deployed = getattr(cluster, "deployed", None)
    return (str(getattr(cluster, "build", type(cluster).__name__)),
            json.dumps(deployed() if deployed else {}, sort_keys=True))


def soaked_standby(cluster, means: str = "master_fault_planting",
                   keys: int = KEYS) -> tuple[list[str], int, int]:
    """``soaked`` as a precondition: a standby that did not catch up fails the test with what
    it reported, or, where the leader keeps no OpLog at all after the puts (a deployment
    without ``--enable_oplog``: primary sequence 0), the test is n/a naming ``means``, which
    needs a standby that follows one. That probe is made once per deployment and worker
    (``NO_OPLOG``)."""
    no_oplog_seen(cluster, means)
    written, leader, standby, lagging = soaked(cluster, keys)
    if lagging is not None:
        follows(cluster, standby, written, lagging, means)
    return written, leader, standby


def no_oplog_seen(cluster, means: str) -> None:
    """n/a naming ``means`` at once where this deployment was seen keeping no OpLog
    (``NO_OPLOG``)."""
    deployment = deployment_key(cluster)
    if deployment in NO_OPLOG:
        raise TargetLacks(Capability(means), NO_OPLOG[deployment])


def follows(cluster, standby: int, written: list[str], lagging: str, means: str) -> None:
    """``standby`` did not catch up with ``written`` (``lagging``: what it reported): n/a naming
    ``means`` where the leader keeps no OpLog at all (recorded in ``NO_OPLOG``), else a failed
    precondition."""
    if cluster.replication(standby)["primary_seq"] == 0:
        seen = (f"the leader of {cluster.build} keeps no OpLog after {len(written)} "
                f"acknowledged puts (its masters run without --enable_oplog=true: the build has "
                f"no such flag, or the deployment leaves it at its default), so no standby "
                f"follows it: {lagging}")
        probe = os.environ.get("PYTEST_CURRENT_TEST", "a test").rsplit(" ", 1)[0]
        NO_OPLOG[deployment_key(cluster)] = (
            f"{seen} (probed in this session by {probe} at {time.strftime('%H:%M:%S')} on the "
            f"same deployment)")
        raise TargetLacks(Capability(means), seen)
    pytest.fail(f"precondition: {lagging}", pytrace=False)


def behind(cluster, standby: int, what: str) -> str | None:
    """None once ``standby`` applied everything the leader made durable (within WAIT); else
    what it last reported, in words."""
    seen: list[dict] = []

    def applied() -> bool:
        seen.append(cluster.replication(standby))
        return caught_up_from(seen[-1])

    try:
        wait_until(applied, WAIT, f"the standby to apply {what}")
    except Timeout:
        return (f"{WAIT:g}s after {what} the standby had not applied them ("
                + (said(seen[-1]) if seen else "it reported nothing") + ")")
    return None


def said(at: dict) -> str:
    """A replication report in words."""
    text = (f"the standby reported applied sequence {at['applied_seq']}, lag {at['lag']}, role "
            f"{at['role']}; the leader's durable OpLog is at {at['primary_seq']}")
    return text + (" (it keeps none)" if at["primary_seq"] == 0 else "")


def caught_up_from(at: dict) -> bool:
    return at["primary_seq"] > 0 and at["applied_seq"] >= at["primary_seq"]


def serving_keys(cluster, expected: list[str], timeout: float = WAIT,
                 writer: int = 0, standby: int | None = None) -> tuple[int, list[str]]:
    """The master serving after a failover and the keys it holds once they reach ``expected``
    or settled (``SETTLE``; the last list seen), or the first list where the target's serving
    master lists every object at once (``keys_final_when_serving``). Every object was written
    through store client ``writer``, so its replicas are on that client's segment. No master
    serving within ``timeout`` is the build's failover failing: the test fails saying so, with
    what ``standby``'s log says of its restore."""
    try:
        new = cluster.leader(timeout=timeout)
    except Timeout as exc:
        seen = str(exc).rpartition("last observed: ")[2] or "nothing"
        told = restore_lines(cluster, standby) if standby is not None else ""
        pytest.fail(f"no master served within {timeout:g}s after the failover (masters "
                    f"serving: {seen}): the standby never took over{told}", pytrace=False)
    seen: list[list[str]] = []
    mounted: list[list[str]] = []
    remount = WriterRemount(cluster, writer)

    def complete() -> bool:
        seen.append(sorted(cluster.keys(new)))
        if seen[-1] == sorted(expected) or cluster.keys_final_when_serving:
            return True
        if remount.observed:
            mounted.append(seen[-1])
        else:
            remount.ask()
        return len(mounted) > 1 and mounted[-1] == mounted[-2]

    try:
        wait_until(complete, SETTLE, "the new leader's key list to settle")
    except Timeout:
        pass
    return new, seen[-1]


class WriterRemount:
    """Whether the writer's segment is mounted on the serving master again: the event after
    which 0.3.13's key list no longer grows (it lists an object once its replica's segment is
    mounted). Asked through ``client_segment``/``segment_status``; a target that lacks either
    (``TargetLacks``) never reports the event, and the wait falls back to SETTLE."""

    def __init__(self, cluster, writer: int):
        self.cluster = cluster
        self.writer = writer
        self.lacking = False
        self.observed = False
        """True once seen: key lists read from then on can no longer grow."""

    def ask(self) -> None:
        if self.lacking:
            return
        try:
            self.observed = self.cluster.segment_status(
                self.cluster.client_segment(self.writer)) is not None
        except TargetLacks:
            self.lacking = True
        except Exception:  # noqa: BLE001 (not yet: the new leader's admin plane is starting)
            pass


PLANTED = {"overlap": "a memory descriptor overlapping 'k3'",
           "unknown_segment": "a memory descriptor on a segment nobody mounted",
           "malformed": "object metadata that does not decode or says size 0"}
"""The bad entries planted (``kind`` of ``plant_bad_descriptor``, modelled on k3's metadata)."""
PLANTED_KEY = "planted-bad-descriptor"
"""The key of the planted entry (``plant_bad_descriptor``'s default)."""
RESTORE_DROPPED = "ha_restore_dropped_entries"
"""The gauge of entries the last restore dropped, where a build exports one (the reference
does; a build without it is judged by its log alone)."""


def plant_bad_descriptor(cluster, standby: int, kind: str = "overlap",
                         key: str = PLANTED_KEY) -> int:
    seq = cluster.plant_bad_descriptor("k3", key=key, kind=kind)
    wait_until(lambda: cluster.replication(standby)["applied_seq"] >= seq, WAIT,
               "the standby to apply the planted entry")
    return seq


def failover_with_planted(mc_master_cluster, kind: str, key: str = PLANTED_KEY,
                          served_too: bool = False):
    """MP-2's setting: a soaked standby replays one planted entry of ``kind`` (the object
    ``key``), then the leader is SIGKILLed. (cluster, the valid keys, the new leader, the keys
    it serves: of the valid ones, and ``key`` too where ``served_too``)."""
    cluster = mc_master_cluster(masters=2, clients=1, partial_restore=True)
    keys, leader, standby = soaked_standby(cluster)
    plant_bad_descriptor(cluster, standby, kind, key=key)
    cluster.kill_master(leader)
    new, kept = serving_keys(cluster, [*keys, key] if served_too else keys)
    return cluster, keys, new, kept


def remove_some(cluster, keys: list[str], standby: int,
                follows: bool = True) -> tuple[list[str], str | None]:
    """Remove every fourth key through the leader (forced: past the read lease) and give the
    standby WAIT to apply everything the leader made durable (``follows``: it caught up with
    the puts; else it is not waited for again); the keys that remain, and what the standby
    reported if it did not catch up (``behind``)."""
    client = cluster.client(0)
    removed = keys[::4]
    for key in removed:
        result = client.remove(key, force=True)
        assert result["ok"], f"precondition: remove {key} failed on the healthy leader: {result}"
    return ([k for k in keys if k not in removed],
            behind(cluster, standby, f"the {len(removed)} removes") if follows else None)


@pytest.mark.mc_req("MP-6")
def test_soaked_standby_survives_leader_crash_with_every_object(mc_master_cluster):
    """Puts and removes both change the index: the standby must come up with the objects that
    exist, not the ones removed before the crash."""
    cluster = mc_master_cluster(masters=2, clients=1)
    written, leader, standby, lagging = soaked(cluster)
    keys, lagging_removes = remove_some(cluster, written, standby, follows=lagging is None)
    cluster.kill_master(leader)
    new, kept = serving_keys(cluster, keys)
    missing = sorted(set(keys) - set(kept))
    back = sorted(set(kept) - set(keys))
    before = "; ".join(n for n in (lagging, lagging_removes) if n)
    assert kept == sorted(keys), (
        f"{len(kept)} of {len(keys)} objects after failover: a standby that ran before the "
        f"data was written came up as leader (master {new}) after the leader was killed "
        f"({len(written)} written, {len(written) - len(keys)} removed): missing "
        f"{missing[:10]}; removed before the crash yet back in the index: {back[:10]}; "
        + (f"before the crash: {before}; " if before else "")
        + "MP-6 requires every object survive, with the index intact")


LATE = 5
"""Objects put just before the crash, with no wait for the standby."""


def durable_seq(cluster, standby: int) -> str:
    """The leader's durable OpLog sequence as the HA store holds it (seen through the
    standby's replication report), in words for a failure message."""
    try:
        return str(cluster.replication(standby)["primary_seq"])
    except (TargetLacks, ObservationFailed) as exc:
        return f"unknown ({exc})"


def ha_store_proxy(mc_target, mc_faults, request, name: str) -> tuple[str, Any, str]:
    """A fault proxy in front of the deployment's HA store (etcd or Redis): (the backend, the
    proxy, the address a master is started on to go through it)."""
    ha = mc_target.deployment_backends()["ha"]
    store = (request.getfixturevalue("mc_redis").address if ha == "redis"
             else request.getfixturevalue("mc_etcd").endpoints[0])
    proxy, address = mc_faults.proxy(f"{name}-{ha}", store)
    return ha, proxy, address


def slow_leader(cluster, mc_target, mc_faults, request) -> tuple[Any, int, int]:
    """A leader whose HA store is reached through a fault proxy (started as a standby on the
    proxy's address, then handed leadership by a graceful stop of the first leader) and a
    standby that applied everything it wrote: (the proxy, leader, standby)."""
    ha, proxy, address = ha_store_proxy(mc_target, mc_faults, request, "leader-store")
    first = cluster.leader(timeout=WAIT)
    proxied = cluster.start_master(**{ha: address})
    cluster.stop_master(first)
    leader = cluster.leader(timeout=2 * WAIT)
    assert leader == proxied, (
        f"precondition: after the first leader's graceful stop, master {leader} serves, not "
        f"master {proxied} (the one reaching its HA store through the proxy)")
    return proxy, leader, cluster.start_master()


@pytest.mark.mc_req("MP-6")
def test_writes_acknowledged_just_before_the_crash_survive_it(mc_master_cluster, mc_target,
                                                               mc_faults, request):
    """MP-6's "every object" at the crash's edge: the leader's HA store answers slowly
    (SLOW_STORE_MS), and the leader is killed the moment it has acknowledged its last puts and
    then removes. An acknowledged write is one the index keeps, so the standby that takes over
    must serve the late puts and not the late removes; a leader that answers before its log
    entry is durable loses them (the kill lands while the entry is still on its way)."""
    cluster = mc_master_cluster(masters=1, clients=0)
    proxy, leader, standby = slow_leader(cluster, mc_target, mc_faults, request)
    cluster.start_client()
    written = put_keys(cluster.client(0), KEYS)
    lagging = behind(cluster, standby, f"{KEYS} acknowledged puts")
    before = durable_seq(cluster, standby)
    proxy.add_toxic(type="latency", attributes={"latency": SLOW_STORE_MS}, name="slow-leader")
    client = cluster.client(0)
    late_put = put_keys(client, LATE, prefix="late")
    late_removed = written[1::8]
    for key in late_removed:  # the last acknowledged write before the kill is a remove
        result = client.remove(key, force=True)
        assert result["ok"], f"precondition: remove {key} failed on the healthy leader: {result}"
    cluster.kill_master(leader)
    proxy.destroy_toxic("slow-leader")
    at_kill = durable_seq(cluster, standby)
    expected = [k for k in written if k not in late_removed] + late_put
    new, kept = serving_keys(cluster, expected, timeout=2 * WAIT)
    lost = sorted(set(late_put) - set(kept))
    back = sorted(set(late_removed) & set(kept))
    older = sorted(set(expected) - set(late_put) - set(kept))
    assert kept == sorted(expected), (
        f"the leader, its HA store answering in {SLOW_STORE_MS} ms, was killed right after "
        f"acknowledging {len(late_put)} puts and then {len(late_removed)} removes; the standby "
        f"that took over (master {new}) serves {len(kept)} objects of the {len(expected)} left: "
        f"acknowledged puts missing: {lost}; acknowledged removes undone: {back}; older objects "
        f"missing: {older[:10]}; the durable OpLog sequence in the HA store was {before} "
        f"before the late writes and {at_kill} right after the kill ({len(late_put)} puts and "
        f"{len(late_removed)} removes acknowledged in between)"
        + (f"; before the late writes: {lagging}" if lagging else "")
        + restore_lines(cluster, new) + "; MP-6 requires every object survive, with the index "
        "intact")


@pytest.mark.mc_req("MP-6")
def test_objects_put_on_memory_freed_by_removes_survive_a_leader_crash(mc_master_cluster):
    """MP-6's "every object" whatever the order of their memory: objects put after others were
    removed may take the memory the removes freed (a first-fit allocator places them below
    objects written before them), so the replicated index lists objects out of address order,
    which a restore that checks descriptors for overlaps must not read as overlaps."""
    cluster = mc_master_cluster(masters=2, clients=1)
    written, leader, standby, lagging = soaked(cluster)
    keys, lagging_removes = remove_some(cluster, written, standby, follows=lagging is None)
    reused = put_keys(cluster.client(0), len(written) - len(keys), prefix="r")
    lagging_reuse = (behind(cluster, standby, f"the {len(reused)} puts after the removes")
                     if lagging is None and lagging_removes is None else None)
    cluster.kill_master(leader)
    expected = keys + reused
    new, kept = serving_keys(cluster, expected)
    missing = sorted(set(expected) - set(kept))
    back = sorted(set(kept) - set(expected))
    before = "; ".join(n for n in (lagging, lagging_removes, lagging_reuse) if n)
    assert kept == sorted(expected), (
        f"{len(kept)} of {len(expected)} objects after failover: {len(written)} written, "
        f"{len(written) - len(keys)} removed, then {len(reused)} put after the removes; the "
        f"standby that ran before them all came up as leader (master {new}): "
        f"missing {missing[:10]} ({sum(k in reused for k in missing)} of them put after the "
        f"removes); removed yet back in the index: {back[:10]}"
        + (f"; before the crash: {before}" if before else "") + restore_lines(cluster, new)
        + "; MP-6 requires every object survive, with the index intact")


@pytest.mark.mc_req("MP-3")
@pytest.mark.mc_demands("promotability")
def test_standby_exposes_an_honest_promotability_predicate(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=0)
    # asked before any client: a build with no predicate FAILs here, also on a deployment the
    # run only observes (where starting a client would be n/a first); once a leader serves,
    # so that the other master is the one standby (0.3.10-0.3.12 report both as standbys
    # until the election is over)
    cluster.leader(timeout=WAIT)
    cluster.promotable(only_standby(cluster))
    cluster.start_client()
    keys, _, standby = soaked_standby(cluster, "master_cluster")
    answer = cluster.promotable(standby)
    missing = [f for f in ("promotable", "reason", "validation", "applied_seq", "primary_seq",
                           "keys_restorable") if f not in answer]
    assert not missing, (
        f"the standby's promotability answer lacks {missing} (it said {dict(answer)}); MP-3 "
        f"requires the boolean, the dry-run validation outcome, its applied sequence, the "
        f"primary's sequence and the key count it would restore")
    assert answer["promotable"] is True and answer["keys_restorable"] == len(keys), (
        f"a standby that applied all {len(keys)} puts answers promotable="
        f"{answer['promotable']} with keys_restorable={answer['keys_restorable']} (applied "
        f"{answer['applied_seq']} of {answer['primary_seq']}); MP-3 requires true to mean "
        f"'promoted now, I come up with the index intact'")


BURST = 20
"""Writes, each followed at once by a question to the standby, in the "behind" test below."""


@pytest.mark.mc_req("MP-3", "MP-5")
@pytest.mark.mc_demands("promotability")
def test_a_standby_behind_the_primary_never_says_promotable(mc_master_cluster):
    """MP-3's "now": a caught-up standby is asked right after each of a run of writes, before it
    can have applied them all. An answer that reports fewer entries applied than the primary
    made durable must not say promotable: promoted then, it would come up without them."""
    cluster = mc_master_cluster(masters=2, clients=0)
    cluster.leader(timeout=WAIT)
    cluster.promotable(only_standby(cluster))  # a build with no predicate FAILs here (demanded)
    cluster.start_client()
    _, _, standby = soaked_standby(cluster, "master_cluster", keys=4)
    client = cluster.client(0)
    answers = []
    for i in range(BURST):
        result = put_fresh(client, f"burst{i}", 64)
        assert result["ok"], f"precondition: put burst{i} failed on the healthy leader: {result}"
        answers.append(cluster.promotable(standby))
    wrong = [a for a in answers if a["promotable"] and a["applied_seq"] < a["primary_seq"]]
    assert not wrong, (
        f"asked right after each of {BURST} writes, the standby said promotable=true while "
        f"reporting it had applied less than the primary's durable sequence in {len(wrong)} of "
        f"{len(answers)} answers (first: {dict(wrong[0])}); MP-3 requires true to mean "
        f"'promoted now, I come up with the index intact', and MP-5 that state alone never "
        f"make a standby promotable")


def fill_segment(client, start: int = 64 << 20) -> list[str]:
    """Put objects through ``client`` until its leader allocates no more: a one-byte object
    first, then sizes from ``start`` down, each size repeated while it fits and halved when it
    does not, down to one byte. On a first-fit allocator without alignment (the reference's)
    the writer's segment ends up full to its last byte. The keys put."""
    keys = ["fill-1b"]
    result = put_fresh(client, keys[0], 1)
    assert result["ok"], f"precondition: a put of a one-byte object failed: {result}"
    size = start
    while size >= 1:
        key = f"fill-{len(keys)}"
        if put_fresh(client, key, size)["ok"]:
            keys.append(key)
        else:
            size //= 2
    return keys


@pytest.mark.mc_req("MP-3")
@pytest.mark.mc_demands("promotability")
def test_a_standby_whose_objects_fill_a_segment_is_promotable(mc_master_cluster):
    """MP-3's edge of a valid context: objects from one byte up to the last byte the writer's
    segment has (a full segment, its last object ending where the segment ends). Nothing in it
    is invalid, so a caught-up standby must say promotable and count every key."""
    cluster = mc_master_cluster(masters=2, clients=0)
    cluster.leader(timeout=WAIT)
    cluster.promotable(only_standby(cluster))  # a build with no predicate FAILs here (demanded)
    cluster.start_client()
    keys = fill_segment(cluster.client(0))
    standby = only_standby(cluster)
    caught_up(cluster, standby, f"{len(keys)} puts filling the writer's segment")
    answer = cluster.promotable(standby)
    assert answer["promotable"] is True and answer["keys_restorable"] == len(keys), (
        f"a standby that applied all {len(keys)} puts, a one-byte object and objects filling "
        f"the writer's segment to its end, answers promotable={answer['promotable']} with "
        f"keys_restorable={answer['keys_restorable']} ({dict(answer)}); MP-3 requires true "
        f"for a context that validates, with the key count it would restore")


@pytest.mark.mc_req("MP-1", "MP-5")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.mc_demands("promotability")
def test_invalid_context_is_not_promotable(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    soaked_standby(cluster)
    standby = only_standby(cluster)
    plant_bad_descriptor(cluster, standby)
    answer = cluster.promotable(standby)
    lag = cluster.replication(standby)["lag"]
    assert answer["promotable"] is False, (
        f"the standby's promotion context holds overlapping memory descriptors, yet it reports "
        f"promotable=true (lag {lag}, applied {answer.get('applied_seq')} of "
        f"{answer.get('primary_seq')}); MP-1 requires the dry-run validation to fail and MP-5 "
        f"that lag 0 alone never make a standby promotable")


def leader_has_done_housekeeping(cluster, client: int) -> str | None:
    """Kill store client ``client`` and wait until its segment is gone: a barrier after which
    whoever leads has run its periodic housekeeping (client expiry) at least once since the
    kill, so anything that would make it step down meanwhile has been seen. None once the
    segment is gone; else what was last seen after 2 * WAIT (no leader expired it)."""
    segment = cluster.client_segment(client)
    cluster.client(client).kill()

    def gone() -> bool:
        cluster.leader(timeout=WAIT)
        return cluster.segment_status(segment) is None

    try:
        # any error counts as "not yet": a leader that stepped down leaves a window in which a
        # target's segment query fails in its own way (named in the message if it persists)
        wait_until(gone, 2 * WAIT, f"the killed client's segment {segment} to disappear",
                   ignore=(Exception,))
    except Timeout as exc:
        return str(exc)
    return None


@pytest.mark.mc_req("MP-1")
@pytest.mark.mc_requires("master_fault_planting")
def test_handover_to_an_invalid_context_is_refused_and_leader_stays(mc_master_cluster):
    """The refused handover must leave the leader in place in its own term: checked again
    after the leader demonstrably ran its housekeeping (a leader that steps down on the
    announced handover and later wins a new election is not "staying in place")."""
    cluster = mc_master_cluster(masters=2, clients=1, client_ttl=1.5)
    keys, leader, standby = soaked_standby(cluster)
    plant_bad_descriptor(cluster, standby)
    cluster.start_client()  # holds no object: the barrier below kills it
    term = cluster.leader_view()
    refused_before = cluster.metrics(standby).get("ha_promotions_refused_total", 0)
    status, body = cluster.promote(standby)
    assert cluster.leader(timeout=WAIT) == leader, (
        f"a handover to a standby whose validation fails went ahead (HTTP {status}: {body}); "
        f"MP-1 requires the candidate refuse and the current leader stay in place")
    assert not 200 <= status < 300 and not body.get("promoted"), (
        f"the leader stayed, but the candidate answered the handover with HTTP {status}: "
        f"{body}; MP-1's candidate refuses promotion, so its answer must say it was not promoted")
    refused = cluster.metrics(standby).get("ha_promotions_refused_total", 0) - refused_before
    assert refused == 1, (
        f"the candidate refused one handover (HTTP {status}: {body}) and its "
        f"ha_promotions_refused_total (the RFC's counter of refused promotions) rose by "
        f"{refused}, not 1")
    stuck = leader_has_done_housekeeping(cluster, 1)
    assert stuck is None, (
        f"after a refused handover (HTTP {status}: {body}) the leader did not go on leading: "
        f"a store client killed after the refusal was never expired ({stuck}); MP-1 requires "
        f"a refused promotion to leave the current leader in place")
    after = cluster.leader_view()
    assert (cluster.leader(timeout=WAIT), after.get("view_version")) == (
        leader, term.get("view_version")), (
        f"after a refused handover (HTTP {status}: {body}) the leader did not stay in place: "
        f"the election was {term} before and {after} once the leader had expired a dead "
        f"client; MP-1 requires a refused promotion to leave the current leader (and its "
        f"term) in place")
    assert sorted(cluster.keys(leader)) == sorted(keys)
    assert cluster.client(0).put("after-refusal", 64)["ok"], "the leader stopped taking writes"


@pytest.mark.mc_req("MP-1")
def test_handover_to_a_caught_up_standby_goes_ahead(mc_master_cluster):
    """MP-1's other side: a candidate refuses only when its validation fails. A standby that
    caught up with a valid promotion context, asked to take over, does: it becomes the serving
    leader in a newer term, with every object, and the old leader steps aside."""
    cluster = mc_master_cluster(masters=2, clients=1)
    keys, leader, standby = soaked_standby(cluster, means="master_cluster")
    term = cluster.leader_view()
    status, body = cluster.promote(standby)
    assert status == 200 and body.get("promoted"), (
        f"a handover to a standby that had caught up with a valid promotion context did not go "
        f"ahead (HTTP {status}: {body}); MP-1 refuses only a candidate whose validation fails")
    new, kept = serving_keys(cluster, keys, standby=standby)
    after = cluster.leader_view()
    assert new == standby, (
        f"the handover to master {standby} answered HTTP {status} {body}, but master {new} "
        f"serves (election {term} before, {after} after)")
    assert after.get("view_version") != term.get("view_version"), (
        f"master {standby} serves after the handover in the old leader's term ({after}): a "
        f"handover is a new term")
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"after the handover master {standby} serves {len(kept)} of {len(keys)} objects (lost "
        f"e.g. {lost[:5]}){restore_lines(cluster, standby)}; MP-1: a valid context comes up "
        f"with the index intact")


RESTORE_OUTCOME = ("overlap", "fail", "reject", "restored from")
"""Words of a master's log line that say how its restore went (what it refused or dropped)."""


def restore_lines(cluster, index: int) -> str:
    """What master ``index``'s log says about its restore's outcome (the last four lines naming
    the restore and one of ``RESTORE_OUTCOME``), for a failure message; empty when it says
    nothing."""
    lines = [line.strip()[:200] for line in cluster.master_log(index).splitlines()
             if "restor" in line.lower() and any(w in line.lower() for w in RESTORE_OUTCOME)]
    return f"; its log: {' | '.join(lines[-4:])}" if lines else ""


DROP_WORDS = ("drop", "invalid", "overlap", "reject", "skip", "discard", "fail")
"""Words of a log line that reports an entry as not restored."""


def drop_reports(cluster, index: int, key: str) -> list[str]:
    """Master ``index``'s log lines that report ``key`` as not restored: the line names the key
    and says what happened to it (a line that merely mentions the key, e.g. when the entry was
    replayed, reports nothing)."""
    return [line.strip()[:200] for line in cluster.master_log(index).splitlines()
            if re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", line)
            and any(w in line.lower() for w in DROP_WORDS)]


def promoted_or_refused(cluster, standby: int) -> str:
    """After the leader died: "promoted" once the standby's role is leader, "refused" once it
    counts a refused promotion (``ha_promotions_refused_total`` in its /metrics, the RFC's
    counter); the first of the two seen within 2 * WAIT (a standby that does neither FAILs)."""
    def outcome() -> str | None:
        if cluster.replication(standby)["role"] == "leader":
            return "promoted"
        return "refused" if cluster.metrics(standby).get("ha_promotions_refused_total") else None

    try:
        return wait_until(outcome, 2 * WAIT, "the standby to be promoted or refuse promotion")
    except Timeout:
        pytest.fail(f"{2 * WAIT:g}s after the leader was killed, the standby whose promotion "
                    f"context fails validation neither was promoted nor counted a refused "
                    f"promotion: {cluster.replication(standby)}", pytrace=False)


@pytest.mark.mc_req("MP-1")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_crash_failover_to_an_invalid_context_is_refused(mc_master_cluster, kind):
    """The leader dies while the only standby's promotion context holds a bad memory
    descriptor: the candidate's dry run fails, so it must refuse promotion (a build without a
    planned handover shows MP-1 here, at the failover it does have)."""
    cluster = mc_master_cluster(masters=2, clients=1)
    keys, leader, standby = soaked_standby(cluster)
    seq = plant_bad_descriptor(cluster, standby, kind)
    before = cluster.replication(standby)
    cluster.kill_master(leader)
    if promoted_or_refused(cluster, standby) == "refused":
        return
    new, kept = serving_keys(cluster, keys)
    pytest.fail(
        f"the leader was killed while its only standby's promotion context held "
        f"{PLANTED[kind]} (planted OpLog entry {seq}; {said(before)} before the kill); the "
        f"standby was promoted anyway and master {new} serves {len(kept)} of {len(keys)} objects"
        f"{restore_lines(cluster, new)}; MP-1 requires the dry-run validation to fail and the "
        f"candidate to refuse promotion",
        pytrace=False)


ZERO_SIZE = {"zero_size": "an object of size 0 whose one memory descriptor is 0 bytes long"}
"""A planted object no put makes (size 0) with a descriptor Mooncake's restore refuses (0 bytes):
invalid, judged where MP-2 is (the restore keeps the rest), not at MP-1's failover."""


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.parametrize("kind", sorted({**PLANTED, **ZERO_SIZE}))
def test_partial_restore_keeps_every_valid_object(mc_master_cluster, kind):
    what = {**PLANTED, **ZERO_SIZE}[kind]
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster, kind)
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"one planted entry holding {what} cost {len(lost)} of {len(keys)} valid "
        f"objects after "
        f"failover (master {new} serves {len(kept)}, e.g. lost {lost[:5]})"
        f"{restore_lines(cluster, new)}; MP-2 requires the restore drop only the invalid entry")
    assert drop_reports(cluster, new, PLANTED_KEY), (
        f"the promoted master {new} dropped the planted entry {PLANTED_KEY!r} ({what}; "
        f"it serves {len(kept)} objects, not it) without a log line naming it as dropped or "
        f"invalid{restore_lines(cluster, new)}; MP-2 requires the dropped entry be reported")
    assert kind != "zero_size" or PLANTED_KEY not in kept, (
        f"the promoted master {new} serves {PLANTED_KEY!r}, {what}{restore_lines(cluster, new)}; "
        f"MP-2 requires the invalid entry be dropped")
    assert kind != "overlap" or not {TEMPLATE, PLANTED_KEY} <= set(kept), (
        f"the promoted master {new} serves both {TEMPLATE!r} and the planted entry "
        f"{PLANTED_KEY!r}, whose only memory descriptor overlaps {TEMPLATE!r}'s: one of the two "
        f"is invalid{restore_lines(cluster, new)}; MP-2 requires the invalid entry be dropped, "
        f"not restored beside the object it overlaps")
    counted = cluster.metrics(new).get(RESTORE_DROPPED)
    assert counted is None or counted >= 1, (
        f"the promoted master {new} dropped the planted entry {PLANTED_KEY!r} ({what}), "
        f"yet its own count of entries its restore dropped ({RESTORE_DROPPED} in /metrics) "
        f"says {counted:g}{restore_lines(cluster, new)}; MP-2 requires the drop be reported, "
        f"not reported as none")


INTRINSIC = ("unknown_segment", "malformed")
"""Planted kinds invalid in themselves, whatever else the log holds (an overlap makes one of two
entries invalid, and which one depends on their order)."""


def caught_up(cluster, standby: int, what: str) -> None:
    lagging = behind(cluster, standby, what)
    if lagging is not None:
        pytest.fail(f"precondition: {lagging}", pytrace=False)


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.parametrize("kind", INTRINSIC)
def test_an_invalid_entry_before_the_valid_objects_drops_only_itself(mc_master_cluster, kind):
    """MP-2's "first" edge: the invalid entry comes early in the log (after only the four
    objects its template needs), every other valid object after it. Only it goes."""
    cluster = mc_master_cluster(masters=2, clients=1, partial_restore=True)
    early, leader, standby = soaked_few(cluster)
    plant_bad_descriptor(cluster, standby, kind)
    late = put_keys(cluster.client(0), KEYS, prefix="late")
    caught_up(cluster, standby, f"{KEYS} puts after the planted entry")
    keys = early + late
    cluster.kill_master(leader)
    new, kept = serving_keys(cluster, keys)
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"one entry holding {PLANTED[kind]}, planted before {len(late)} of the {len(keys)} "
        f"valid objects, cost {len(lost)} of them after failover (master {new} serves "
        f"{len(kept)}, e.g. lost {lost[:5]}){restore_lines(cluster, new)}; MP-2 requires the "
        f"restore drop only the invalid entry, wherever it lies in the log")
    assert drop_reports(cluster, new, PLANTED_KEY), (
        f"the promoted master {new} dropped the planted entry {PLANTED_KEY!r} ({PLANTED[kind]}) "
        f"without a log line naming it as dropped or invalid{restore_lines(cluster, new)}; MP-2 "
        f"requires the dropped entry be reported")


TEMPLATE = "k3"
"""The object the planted entries of ``soaked_few``'s tests are modelled on."""


def plant_removal(cluster, key: str) -> None:
    """``cluster.plant_removal(key)``, n/a naming the means where the handle has none."""
    plant = getattr(cluster, "plant_removal", None)
    if plant is None:
        raise TargetLacks(Capability("master_fault_planting"), (
            f"{type(cluster).__name__} cannot plant a removal in the replicated OpLog"))
    plant(key)


def soaked_few(cluster) -> tuple[list[str], int, int]:
    """``soaked_standby`` with only k0..k3 written (k3 is the planter's template)."""
    return soaked_standby(cluster, keys=4)


def removed(client, key: str) -> None:
    """Remove ``key`` through the healthy leader, retried for WAIT (a precondition: the
    timeout names the last answer). Only before anything is planted: once the planter moved
    its OpLog prefix, 0.3.13.post1's leader refuses removes with rc=-1002 (ETCD_TRANSACTION_FAIL)
    for the whole WAIT."""
    answers: list = []

    def gone() -> bool:
        answers.append(client.remove(key, force=True))
        return bool(answers[-1]["ok"])

    wait_until(gone, WAIT, f"precondition: the healthy leader to remove {key}",
               describe=lambda _: f"last answer {answers[-1] if answers else None}")


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
def test_a_log_of_only_invalid_entries_restores_nothing_and_reports_every_one(mc_master_cluster):
    """MP-2's "all" edge: every object entry of the promotion context is invalid (the valid
    template objects are removed again). The restore keeps none of them and reports each."""
    cluster = mc_master_cluster(masters=2, clients=1, partial_restore=True)
    templates, leader, standby = soaked_few(cluster)
    client = cluster.client(0)
    for key in templates:
        if key != TEMPLATE:
            removed(client, key)  # through the leader, before anything is planted
    planted = {f"{PLANTED_KEY}-{kind}": kind for kind in INTRINSIC}
    for key, kind in planted.items():
        cluster.plant_bad_descriptor(TEMPLATE, key=key, kind=kind)
    # the template's removal is planted too: after a planted entry a real build's leader may
    # refuse its own OpLog writes (0.3.13.post1: ETCD_TRANSACTION_FAIL, rc=-1002, its prefix
    # moved), which would say nothing of MP-2
    plant_removal(cluster, TEMPLATE)
    caught_up(cluster, standby, "the removes and the planted entries")
    cluster.kill_master(leader)
    new, kept = serving_keys(cluster, [], standby=standby)
    assert not set(kept) & set(planted), (
        f"the promoted master {new} serves {sorted(set(kept) & set(planted))}, entries planted "
        f"invalid ({', '.join(PLANTED[k] for k in INTRINSIC)}){restore_lines(cluster, new)}; "
        f"MP-2 requires an invalid entry be dropped")
    silent = [key for key in planted if not drop_reports(cluster, new, key)]
    assert not silent, (
        f"the promoted master {new}, whose promotion context held only invalid entries, "
        f"reported no drop of {silent} (it serves {kept}){restore_lines(cluster, new)}; MP-2 "
        f"requires every dropped entry be reported")


BESIDE_VALID = {"overlap_beside_valid": "overlapping k3's memory",
                "unknown_segment_beside_valid": "on a segment nobody mounted"}
"""The planted objects of two replicas, one valid: what their invalid replica is."""


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.parametrize("kind", sorted(BESIDE_VALID))
def test_an_invalid_replica_drops_the_replica_not_the_object(mc_master_cluster, kind):
    """MP-2 drops *that entry*: an object of two replicas, one valid and one overlapping
    another object's memory or on a segment nobody mounted, survives on its valid replica, and
    the dropped replica is reported under the object's key."""
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster, kind, served_too=True)
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"an object with one replica {BESIDE_VALID[kind]} cost {len(lost)} of {len(keys)} valid "
        f"objects after failover (e.g. {lost[:5]}){restore_lines(cluster, new)}; MP-2 requires "
        f"the restore drop only the invalid entry")
    assert PLANTED_KEY in kept, (
        f"the promoted master {new} dropped the whole object {PLANTED_KEY!r}, whose second "
        f"replica is valid, for its one replica {BESIDE_VALID[kind]} (it serves "
        f"{len(kept)} objects){restore_lines(cluster, new)}; MP-2 requires the restore drop the "
        f"invalid replica, not the object")
    assert drop_reports(cluster, new, PLANTED_KEY), (
        f"the promoted master {new} keeps {PLANTED_KEY!r} on its valid replica but no log line "
        f"names the key with the replica it dropped{restore_lines(cluster, new)}; MP-2 requires "
        f"the dropped entry be reported")


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
def test_an_object_whose_every_replica_is_invalid_is_dropped_whole(mc_master_cluster):
    """MP-2's "that entry" when it is a whole object: an object of two replicas, each
    overlapping k3's memory, has no valid replica left, so the object goes (it is never served
    with no replica), it is reported, and every valid object survives."""
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster,
                                                     "overlap_on_every_replica")
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"an object whose two replicas both overlap k3's memory cost {len(lost)} of {len(keys)} "
        f"valid objects after failover (e.g. {lost[:5]}){restore_lines(cluster, new)}; MP-2 "
        f"requires the restore drop only the invalid entry")
    assert PLANTED_KEY not in kept, (
        f"the promoted master {new} serves {PLANTED_KEY!r}, whose every replica overlaps k3's "
        f"memory (it serves {len(kept)} objects){restore_lines(cluster, new)}; MP-2 requires an "
        f"object with no valid replica left be dropped")
    assert drop_reports(cluster, new, PLANTED_KEY), (
        f"the promoted master {new} dropped {PLANTED_KEY!r} (no valid replica) but no log line "
        f"names it{restore_lines(cluster, new)}; MP-2 requires the dropped entry be reported")


def shared_memory(cluster, keys: list[str]) -> list[str]:
    """Every pair of replicas, of the objects ``keys`` the serving leader holds, whose memory
    descriptors share a byte of one segment (``replica_descriptors``), in words."""
    ranges = sorted((segment, address, address + size, key, i)
                    for key in keys
                    for i, replica in enumerate(cluster.replica_descriptors(key))
                    for segment, address, size in replica)
    pairs, widest = [], None
    for item in ranges:
        if widest is not None and widest[0] == item[0] and item[1] < widest[2]:
            pairs.append(f"{item[3]!r} replica {item[4]} [{item[1]:#x}, {item[2]:#x}) over "
                         f"{widest[3]!r} replica {widest[4]} [{widest[1]:#x}, {widest[2]:#x}) on "
                         f"{item[0]}")
        if widest is None or widest[0] != item[0] or item[2] > widest[2]:
            widest = item
    return pairs


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
def test_a_dropped_replica_is_not_served_beside_the_valid_one(mc_master_cluster):
    """MP-2 drops *that entry*, so nothing of it is served: the object of two replicas, one
    valid and one overlapping k3's memory, survives on its valid replica alone, and no two
    replicas the new leader serves share a byte of memory (read from the replica descriptors
    the leader serves: buffer addresses and sizes)."""
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster, "overlap_beside_valid",
                                                     served_too=True)
    assert PLANTED_KEY in kept, (
        f"the promoted master {new} does not serve {PLANTED_KEY!r}, whose second replica is "
        f"valid, after dropping its replica overlapping k3's memory (it serves {len(kept)} of "
        f"{len(keys) + 1} objects){restore_lines(cluster, new)}; MP-2 requires the restore drop "
        f"the invalid replica, not the object")
    shared = shared_memory(cluster, kept)
    assert not shared, (
        f"the promoted master {new} serves replicas that share memory: {'; '.join(shared[:5])}"
        f"{restore_lines(cluster, new)}; the planted object's replica overlapping k3's memory "
        f"is invalid, and MP-2 requires that entry be dropped, not restored beside the valid one")


OFF_THE_END = {"straddles_segment_end": "a memory descriptor starting inside k3's segment and "
                                        "running past its end",
               "past_segment_end": "a memory descriptor starting at the end of k3's segment"}
"""The planted kinds whose one descriptor is not inside its segment (``at_segment_end``)."""
AT_THE_END_KEY = "planted-at-segment-end"


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.parametrize("kind", sorted(OFF_THE_END))
def test_a_descriptor_across_or_past_its_segments_end_drops_that_entry(mc_master_cluster, kind):
    """MP-2's range edge: an entry whose memory descriptor runs past the end of its segment
    (straddling the edge, or wholly past it) is invalid: it is dropped and reported, and every
    valid object survives."""
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster, kind)
    lost = sorted(set(keys) - set(kept))
    assert not lost, (
        f"one planted entry holding {OFF_THE_END[kind]} cost {len(lost)} of {len(keys)} valid "
        f"objects after failover (master {new} serves {len(kept)}, e.g. lost {lost[:5]})"
        f"{restore_lines(cluster, new)}; MP-2 requires the restore drop only the invalid entry")
    assert PLANTED_KEY not in kept, (
        f"the promoted master {new} serves {PLANTED_KEY!r}, whose only memory descriptor is "
        f"{OFF_THE_END[kind][2:]}{restore_lines(cluster, new)}; MP-2 requires the invalid entry "
        f"be dropped")
    assert drop_reports(cluster, new, PLANTED_KEY), (
        f"the promoted master {new} dropped {PLANTED_KEY!r} ({OFF_THE_END[kind]}) without a log "
        f"line naming it as dropped or invalid{restore_lines(cluster, new)}; MP-2 requires the "
        f"dropped entry be reported")


@pytest.mark.mc_req("MP-2")
@pytest.mark.mc_requires("master_fault_planting")
def test_a_descriptor_ending_at_its_segments_end_is_restored(mc_master_cluster):
    """The same range's edge from inside: an entry whose memory descriptor's last byte is its
    segment's last (on memory no object holds) is valid, so the restore keeps it with every
    other object."""
    cluster, keys, new, kept = failover_with_planted(mc_master_cluster, "ends_at_segment_end",
                                                     key=AT_THE_END_KEY, served_too=True)
    lost = sorted({*keys, AT_THE_END_KEY} - set(kept))
    assert not lost, (
        f"the promoted master {new} does not serve {lost[:5]} ({len(lost)} of {len(keys) + 1}), "
        f"where {AT_THE_END_KEY!r}'s memory descriptor ends exactly at the end of k3's segment"
        f"{restore_lines(cluster, new)}; a descriptor inside its segment is valid, and MP-2 "
        f"requires the restore keep every valid entry")


@pytest.mark.mc_req("MP-3")
@pytest.mark.mc_requires("master_fault_planting")
@pytest.mark.mc_demands("promotability")
def test_keys_restorable_is_what_the_promotion_restores(mc_master_cluster):
    """With partial restore, a standby holding one bad entry says how many keys it would
    restore; the leader dies and it is promoted: it must then serve exactly that many (the
    count excludes the entry the restore drops)."""
    cluster = mc_master_cluster(masters=2, clients=1, partial_restore=True)
    keys, leader, standby = soaked_standby(cluster)
    plant_bad_descriptor(cluster, standby)
    answer = cluster.promotable(standby)
    cluster.kill_master(leader)
    new, kept = serving_keys(cluster, keys)
    assert answer["keys_restorable"] == len(kept), (
        f"the standby said it would restore {answer['keys_restorable']} keys ({dict(answer)}); "
        f"promoted (master {new}) it serves {len(kept)} ({len(keys)} valid objects written, "
        f"one planted entry holding {PLANTED['overlap']}){restore_lines(cluster, new)}; MP-3 "
        f"requires the predicate report the key count it would restore")


def fresh_standby(cluster) -> tuple[list[str], int]:
    """One master with KEYS objects, then a standby started after the data was written."""
    keys = put_keys(cluster.client(0), KEYS)
    return keys, cluster.start_master()


@pytest.mark.mc_req("MP-4")
def test_standby_without_baseline_is_not_promoted_into_an_empty_index(mc_master_cluster):
    """The RFC's headline case: the leader dies while the only standby is one started after the
    data was written. Whoever serves afterwards must serve every acknowledged object."""
    cluster = mc_master_cluster(masters=1, clients=1)
    keys, fresh = fresh_standby(cluster)
    wait_until(lambda: cluster.replication(fresh)["role"] == "standby", WAIT,
               "the fresh master to run as a standby")
    before = cluster.replication(fresh)
    cluster.kill_master(0)
    try:
        new, kept = serving_keys(cluster, keys, timeout=2 * WAIT)
    except Timeout:
        pytest.fail(f"after the leader was killed, the standby started after the data was "
                    f"written never served within {2 * WAIT:g}s ({cluster.replication(fresh)}); "
                    f"MP-4 allows it to wait until it caught up, not forever", pytrace=False)
    assert new == fresh
    assert kept == sorted(keys), (
        f"{len(kept)} of {len(keys)} objects after failover: the leader was killed while its "
        f"only standby had been started after the data was written ({said(before)} "
        f"before the kill); that standby was promoted and serves {len(kept)} of {len(keys)} "
        f"objects; MP-4 requires a standby with no baseline not be promotable until it "
        f"caught up")


@pytest.mark.mc_req("MP-4")
def test_masters_recreated_after_every_master_died_serve_every_acknowledged_object(
        mc_master_cluster):
    """The RFC's Recreate: every master is killed and new ones are started (a redeploy). The new
    masters remember nothing; what the deployment keeps durable (the OpLog in the HA store,
    snapshots) is all they can restore from. The first of them is a standby with no baseline:
    it must catch up from what is durable before it serves, so the master serving afterwards
    serves every acknowledged object; one serving fewer was promoted without a baseline."""
    cluster = mc_master_cluster(masters=2, clients=1)
    keys = put_keys(cluster.client(0), KEYS)
    leader = cluster.leader(timeout=WAIT)
    standby = only_standby(cluster)
    lagging = behind(cluster, standby, f"{KEYS} acknowledged puts")
    for index in (standby, leader):  # the standby first: no failover happens in between
        cluster.kill_master(index)
    fresh = [cluster.start_master(), cluster.start_master()]
    new, kept = serving_keys(cluster, keys, standby=fresh[0])
    missing = sorted(set(keys) - set(kept))
    assert not missing, (
        f"{len(kept)} of {len(keys)} objects after the masters were recreated: both masters "
        f"were killed after {len(keys)} acknowledged puts (the standby first) and two new ones "
        f"started (masters {fresh}); master {new} serves {len(kept)} of them (missing: "
        f"{missing[:10]})" + (f"; before the kill: {lagging}" if lagging else
                              "; before the kill the standby had applied every put")
        + restore_lines(cluster, new) + "; MP-4 requires a master with no baseline not be "
        "promoted before it has caught up from a snapshot or a full replay")


def promotability_answers(cluster, fresh: int) -> list:
    """Every promotability answer of the fresh standby until it says promotable (or WAIT)."""
    answers = []

    def promotable():
        answer = cluster.promotable(fresh)
        answers.append(answer)
        return answer["promotable"]

    try:
        wait_until(promotable, WAIT, "the fresh standby to become promotable")
    except Timeout:
        pytest.fail(f"a fresh standby never became promotable after catching up; last answer: "
                    f"{answers[-1] if answers else None}", pytrace=False)
    return answers


def assert_true_means_intact(answers: list, keys: list[str], requirement: str,
                             who: str = "the fresh standby") -> None:
    for answer in answers:
        if answer["promotable"]:
            assert answer["keys_restorable"] == len(keys), (
                f"{who} said promotable=true while it could restore only "
                f"{answer['keys_restorable']} of {len(keys)} keys (applied "
                f"{answer['applied_seq']} of {answer['primary_seq']}); {requirement}")


@pytest.mark.mc_req("MP-4")
@pytest.mark.mc_requires("promotability")
def test_fresh_standby_is_not_promotable_until_caught_up(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=1)
    keys, fresh = fresh_standby(cluster)
    answers = promotability_answers(cluster, fresh)
    assert_true_means_intact(answers, keys, "MP-4 requires a standby with no baseline not be "
                                            "promotable until it has caught up")
    cluster.kill_master(0)
    new, kept = serving_keys(cluster, keys)
    assert (new, kept) == (fresh, sorted(keys))


SLOW_STORE_MS = 300
"""Latency added to every answer of the HA store (etcd, or Redis under ``--mc-ha=redis``) to a
fresh standby, so that its replay of the backlog spans several of its promotability answers."""


@pytest.mark.mc_req("MP-3")
@pytest.mark.mc_demands("promotability")
def test_fresh_standby_reports_the_primarys_sequence_while_it_replays(mc_master_cluster,
                                                                      mc_target, mc_faults,
                                                                      request):
    """A standby started after the data was written, its HA store's answers slowed so that it
    is asked while it replays: once it has applied anything it has read the primary's durable
    sequence, and every answer must name that sequence, not its own progress (a standby that
    reports the two as equal looks caught up: the RFC's fresh standby "fully synced in 7
    microseconds")."""
    cluster = mc_master_cluster(masters=1, clients=1)
    cluster.promotable(0)  # a build with no predicate FAILs here (demanded)
    put_keys(cluster.client(0), 2 * KEYS)
    primary = cluster.replication(cluster.leader())["primary_seq"]
    ha, proxy, address = ha_store_proxy(mc_target, mc_faults, request, "fresh-standby")
    proxy.add_toxic(type="latency", attributes={"latency": SLOW_STORE_MS}, name=f"slow-{ha}")
    fresh = cluster.start_master(**{ha: address})
    answers = promotability_answers(cluster, fresh)
    counts = [a["keys_restorable"] for a in answers]
    assert all(type(n) is int and n >= 0 for n in counts) and all(
        a["keys_restorable"] == 0 for a in answers if a["applied_seq"] == 0), (
        f"the fresh standby's answers while it replayed said it would restore {counts} keys "
        f"(applied sequences {[a['applied_seq'] for a in answers]}); MP-3 requires the key count "
        f"it would restore: a count, and none while it has applied nothing")
    judged = [a for a in answers if a["applied_seq"] > 0]
    wrong = [a for a in judged if a["primary_seq"] < primary]
    assert not wrong, (
        f"the leader's durable sequence was {primary}; the fresh standby, having applied "
        f"entries, answered primary_seq below it in {len(wrong)} of {len(judged)} answers "
        f"(first: {dict(wrong[0])}); MP-3 requires the answer carry the primary's sequence "
        f"(a standby without a baseline must not look caught up)")


@pytest.mark.mc_req("MP-3", "MP-5")
@pytest.mark.mc_demands("promotability")
def test_lag_alone_never_makes_a_standby_promotable(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=1)
    keys, fresh = fresh_standby(cluster)
    answers = promotability_answers(cluster, fresh)
    assert_true_means_intact(answers, keys, "MP-5 requires that replication lag and state alone "
                                            "never make a standby promotable")
    for field in ("reason", "validation", "applied_seq", "primary_seq"):
        assert field in answers[-1], f"the promotability answer lacks {field!r} (MP-3, MP-5)"


LOST_PLACE_WINDOW = 3.0
"""How long a standby that can no longer follow the OpLog is asked, after it resumed, whether
it is promotable (many of its polls: the reference's poll every 0.05 s)."""


@pytest.mark.mc_req("MP-3", "MP-5")
@pytest.mark.mc_requires("master_snapshot")
@pytest.mark.mc_demands("promotability")
def test_a_standby_that_lost_its_place_in_the_oplog_is_not_promotable(mc_master_cluster):
    """A caught-up standby is paused while the leader takes writes and the other standby
    writes a snapshot that trims the OpLog history the paused one has not applied. Resumed, it
    cannot follow the log (the batches it needs are gone), whatever its state machine says:
    for LOST_PLACE_WINDOW it must never answer promotable without every key."""
    cluster = mc_master_cluster(masters=3, clients=1, snapshots=True,
                                trim_oplog_after_snapshot=True)
    cluster.leader(timeout=WAIT)
    standbys = cluster.standbys()
    assert len(standbys) == 2, f"precondition: two standbys beside the leader, not {standbys}"
    lost, other = standbys
    cluster.promotable(lost)  # a build with no predicate FAILs here (demanded)
    no_oplog_seen(cluster, "master_snapshot")
    early = put_keys(cluster.client(0), 4)
    lagging = behind(cluster, lost, "4 puts before the pause")
    if lagging is not None:
        follows(cluster, lost, early, lagging, "master_snapshot")
    cluster.pause_master(lost)
    try:
        keys = early + put_keys(cluster.client(0), KEYS, prefix="paused")
        cluster.snapshot(other)
    finally:
        cluster.resume_master(lost)
    answers: list = []

    def said_promotable() -> bool:
        answers.append(cluster.promotable(lost))
        return bool(answers[-1]["promotable"])

    try:
        wait_until(said_promotable, LOST_PLACE_WINDOW, "the standby to say promotable")
    except Timeout:
        pass
    counts = [a["keys_restorable"] for a in answers]
    assert all(type(n) is int and n >= 0 for n in counts), (
        f"the standby that lost its place in the OpLog said it would restore {counts} keys; "
        f"MP-3 requires the key count it would restore")
    assert_true_means_intact(answers, keys, "MP-3 requires true to mean 'promoted now, I come "
                                            "up with the index intact', and MP-5 that state "
                                            "alone never make a standby promotable",
                             who="the standby that lost its place in the OpLog")


@pytest.mark.mc_req("MP-9")
@pytest.mark.mc_requires("master_snapshot")
def test_snapshot_restore_keeps_the_objects_it_reports(mc_master_cluster):
    """Two snapshots are asked of the standby, the second after more writes; ``snapshot()``
    returns once one that holds every acknowledged write exists (a target whose build has its
    leader write snapshots, with no OpLog to replicate, waits for that one)."""
    cluster = mc_master_cluster(masters=2, clients=1, snapshots=True,
                                trim_oplog_after_snapshot=True)
    keys = put_keys(cluster.client(0), 30)
    leader = cluster.leader()
    standby = only_standby(cluster)
    cluster.snapshot(standby)
    # a second, newer snapshot: the restore must start from the newest one retained
    keys += put_keys(cluster.client(0), 10, prefix="later")
    report = cluster.snapshot(standby)
    for index in (leader, standby):
        cluster.kill_master(index)
    fresh = cluster.start_master()
    try:
        new, restored = serving_keys(cluster, keys)
    except Timeout as exc:
        pytest.fail(f"the snapshot reported {report.get('objects')} objects; a master started "
                    f"from the snapshots never served ({exc}); MP-9 requires restore keep what "
                    f"it reports", pytrace=False)
    assert new == fresh
    assert restored == sorted(keys), (
        f"the snapshot reported {report.get('objects')} objects; a master started from it came "
        f"up with {len(restored)} of {len(keys)}; MP-9 requires restore keep what it reports "
        f"(the snapshot: {dict(report)})")
