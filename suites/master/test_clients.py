"""MP-7, MP-8, MP-10: clients across a failover, version skew, segment drain lifecycle."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import Timeout, wait_until, within

REATTACH_BOUND = 15.0
WAIT = 20.0

pytestmark = pytest.mark.mc_requires("master_cluster")


def write_until_ok(client, key: str, bound: float, answers: list, what: str) -> str | None:
    """Write ``key`` until one write succeeds (None) or ``bound`` s passed: then how many
    writes failed and the last answer. ``answers`` collects every answer (a caller judging a
    hung write from outside counts them)."""
    def ok() -> bool:
        answers.append(client.put(key, 64))
        return bool(answers[-1]["ok"])

    try:
        wait_until(ok, bound, what)
    except Timeout:
        return (f"{len(answers)} writes in {bound:g}s all failed, the last with "
                f"{answers[-1].get('error') or answers[-1]}")
    return None


def writes_before_failover(client, key: str = "before-failover") -> None:
    """Precondition: the client writes through the first leader (retried for WAIT s: a client
    that just mounted may still be settling on a loaded machine); what it answered if not."""
    failed = write_until_ok(client, key, WAIT, [], "the client's first write")
    if failed:
        raise AssertionError(f"precondition: the client could not write before any failover: "
                             f"{failed}")


@pytest.mark.mc_req("MP-7")
def test_clients_reattach_to_the_new_leader_within_a_bound(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    client = cluster.client(0)
    writes_before_failover(client)
    cluster.kill_master(cluster.leader())
    cluster.leader(timeout=WAIT)
    try:
        wait_until(lambda: client.put("after-failover", 64)["ok"], REATTACH_BOUND,
                   "the client's writes to succeed on the new leader")
    except Timeout:
        pytest.fail(f"{REATTACH_BOUND:g}s after the leader was killed and a new one served, the "
                    f"client still could not write; MP-7 requires clients reattach to the new "
                    f"leader within a bounded time, never blocked on the dead leader",
                    pytrace=False)


CALL_GRACE = 10.0
"""How long past REATTACH_BOUND one write may still be in flight before it counts as never
returning (below the harness's own call timeouts, so a hung call is seen as one)."""


def writes_within_bound(client, key: str) -> str | None:
    """None once the client's writes succeed again within REATTACH_BOUND (retried while they
    fail); else what was seen: the last failed answer, or that one write never returned
    (judged from outside: its thread is left behind, the cluster's teardown ends the client)."""
    answers: list = []

    def writes() -> str | None:
        return write_until_ok(client, key, REATTACH_BOUND, answers,
                              "the client's writes to succeed on the new leader")

    try:
        return within(REATTACH_BOUND + CALL_GRACE, writes, what="the client's writes")
    except Timeout:
        return (f"a write did not return within {REATTACH_BOUND + CALL_GRACE:g}s "
                f"({len(answers)} returned before it)")


@pytest.mark.mc_req("MP-7")
def test_clients_reattach_to_the_new_leader_when_the_old_one_hangs(mc_master_cluster):
    """A hung leader (SIGSTOP: connections open, nothing answered, nothing reset) is the case
    a socket without a timeout never leaves: the client must give up on it and reattach."""
    cluster = mc_master_cluster(masters=2, clients=1)
    client = cluster.client(0)
    writes_before_failover(client, "before-hang")
    old = cluster.leader()
    cluster.pause_master(old)
    try:
        # the hung master's election key lives until its lease ends, so leader() may still
        # name it: the bound starts once another master leads
        new = wait_until(lambda: [i for i in [leader_or_none(cluster)] if i not in (None, old)],
                         WAIT, f"a master other than the hung master {old} to lead")[0]
        stuck = writes_within_bound(client, "after-hang")
        if stuck:
            pytest.fail(f"the leader (master {old}) hung and master {new} took over, yet the "
                        f"client's writes did not succeed within {REATTACH_BOUND:g}s: {stuck}; "
                        f"MP-7 requires clients reattach to the new leader within a bounded "
                        f"time, never blocked on a call to the old one", pytrace=False)
    finally:
        cluster.kill_master(old)


def leader_or_none(cluster) -> int | None:
    try:
        return cluster.leader(timeout=1.0)
    except Timeout:
        return None


@pytest.mark.mc_req("MP-7")
def test_a_call_with_no_leader_to_reattach_to_returns_within_a_bound(mc_master_cluster):
    """The only master dies: no leader comes, and a client call must still end (an error is
    the honest answer) rather than wait for one for ever."""
    cluster = mc_master_cluster(masters=1, clients=1)
    client = cluster.client(0)
    writes_before_failover(client)
    cluster.kill_master(cluster.leader())
    try:
        within(REATTACH_BOUND, client.exists, "before-failover",
               what="an exists call with no leader")
    except Timeout as exc:
        pytest.fail(f"the only master was killed and an exists call from its client had not "
                    f"returned after {REATTACH_BOUND:g}s ({exc}); MP-7 requires a "
                    f"client never be blocked indefinitely on a dead leader", pytrace=False)


@pytest.mark.mc_req("MP-8")
def test_incompatible_client_is_rejected_loudly_for_reads_and_writes(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=1)
    assert cluster.client(0).put("k", 64)["ok"]
    old = cluster.start_client("skewed-client", version="0.1.0", wait_attached=False)
    wait_until(lambda: old.put("k2", 64)["ok"] is False, WAIT, "the skewed client's write to fail")
    put, read = old.put("k3", 64), old.exists("k")
    assert put["ok"] is False and read["ok"] is False, (
        f"a client announcing version 0.1.0 got read ok={read['ok']} and write ok={put['ok']}; "
        f"MP-8 requires reads and writes behave alike, so a partial rollout cannot look healthy "
        f"while writes fail")
    log = cluster.master_log(cluster.leader())
    assert "0.1.0" in log, (
        "the master rejected a client of version 0.1.0 without a log line naming that version; "
        "MP-8 requires version skew be loud master-side")


@pytest.mark.mc_req("MP-8")
def test_compatible_skew_is_accepted(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=0)
    newer = cluster.start_client("newer-client", version="1.9.0")
    assert newer.put("k", 64)["ok"] and newer.exists("k")["ok"], (
        "a client announcing a compatible newer minor version was refused (MP-8 accepts "
        "compatible skew)")


def exists(client, key: str) -> bool:
    answer = client.exists(key)
    return bool(answer.get("ok") and answer.get("result", {}).get("exists"))


def read_while_draining(cluster, client, source: str, keys: list[str]) -> int:
    """Read (get: the bytes, not only the index entry) each of ``keys`` whose replica is on
    ``source`` while ``source`` is DRAINING, as soon as the drain began. A read counts when the
    segment was DRAINING and held the replica both before and after it (a drain that moved the
    replica first leaves that read unjudged); every counted read must succeed. Returns how many
    counted."""
    def where(key: str) -> tuple[str | None, bool]:
        status = cluster.segment_status(source)
        try:
            return status, source in cluster.replica_segments(key)
        except Exception as exc:  # the master's own answer on where the replica is readable
            if status != "DRAINING":
                raise
            pytest.fail(f"asked where {key}'s replicas are while {source} was DRAINING, the "
                        f"master answered {type(exc).__name__}: {exc}; MP-10 requires a "
                        f"draining segment stay readable", pytrace=False)

    counted = 0
    for key in keys:
        before = where(key)
        answer = client.get(key)
        after = where(key)
        if before == after == ("DRAINING", True):
            counted += 1
            assert answer.get("ok"), (
                f"{key}, whose replica is on the DRAINING segment {source}, could not be read "
                f"({answer.get('error') or answer}); MP-10 requires a draining segment stay "
                f"readable")
    return counted


@pytest.mark.mc_req("MP-10")
def test_segment_drain_lifecycle_and_force_killed_client(mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=3, client_ttl=1.5)
    writer = cluster.client(0)
    keys = [f"k{i}" for i in range(12)]
    for key in keys:
        assert writer.put(key, 64)["ok"], f"precondition: put {key}"
    source = cluster.client_segment(0)
    on_source = [k for k in keys if source in cluster.replica_segments(k)]
    assert on_source, f"precondition: no object landed on {source}"
    cluster.drain_segment(source)
    read_while_draining(cluster, writer, source, on_source)
    assert cluster.segment_status(source) in ("DRAINING", "DRAINED")
    for key in on_source:
        assert exists(writer, key), f"{key} on a draining segment is not readable (MP-10)"
    for i in range(6):
        key = f"new{i}"
        assert cluster.client(1).put(key, 64)["ok"]
        assert source not in cluster.replica_segments(key), (
            f"a new object was allocated on the draining segment {source}; MP-10 requires a "
            f"draining segment take no new allocations")
    wait_until(lambda: cluster.segment_status(source) == "DRAINED", WAIT,
               f"{source} to go DRAINING -> DRAINED")
    lost = [k for k in keys if not exists(writer, k)]
    assert not lost, f"draining {source} lost objects {lost} (MP-10)"
    victim = cluster.client_segment(2)
    cluster.client(2).kill()
    wait_until(lambda: cluster.segment_status(victim) is None, WAIT,
               "a force-killed store client's segment to disappear")
