"""MR-9..MR-16: acting on a new incarnation, failure-triggered recovery, legacy peers,
observability and the end-to-end restart (stages 3 and 4 of the metadata RFC, at the transfer
level; the RDMA endpoint side is in suites/rdma).

Validation scenarios 2 (a transport failure bypasses the TTL), 3 (a new instance_id retires old
endpoints), 4 (the same instance_id does not), 5 (identical NIC names, addresses and keys), 6 (a
failed refresh or retry returns a bounded failure); stage 4 exit criterion: the restart test
passes without endpoint leaks, deadlocks or infinite retries.
"""

from __future__ import annotations

import threading

import pytest

from pytest_mooncake.landed_writes import lands, must_land, write_seen
from pytest_mooncake.planting import (
    buffer_names,
    plant,
    published,
    with_probe_buffer,
    without_instance_id,
)
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.waits import Timeout, holds_for, wait_until, within

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000
CALL_DEADLINE = 30.0

pytestmark = pytest.mark.mc_requires("engine", "engine_restart")


def short(instance_id: str | None) -> str:
    return f"{instance_id[:8]}.." if instance_id else "none"


def ttl_s(engine, asked_ms: float) -> float:
    """The TTL ``engine`` runs with, in seconds (what was asked where it reports none)."""
    ttl = engine.cache_ttl_ms
    return (asked_ms if ttl is None else ttl) / 1000


def restarted_and_reached(a, b, what: str) -> tuple[str | None, str | None]:
    """Restart A and wait for B's writes to reach the new process (within WAIT past B's TTL);
    the old and new instance ids."""
    old_id = a.descriptor().get("instance_id")
    a.restart()
    new_id = a.descriptor().get("instance_id")
    bound = WAIT + ttl_s(b, SHORT_TTL_MS)
    try:
        wait_until(lambda: lands(b, a, b"after-restart!!!"), bound, "B's writes to reach the new A")
    except Timeout:
        pytest.fail(
            f"after the peer restarted (instance {short(old_id)} -> {short(new_id)}), B's writes "
            f"to the new process's own buffer never landed within {bound:g}s (TTL "
            f"{ttl_s(b, SHORT_TTL_MS):g}s as B runs); {what}", pytrace=False)
    return old_id, new_id


@pytest.mark.mc_req("MR-9")
def test_new_instance_is_followed(mc_engine):
    """MR-9's first clause, judged by transfers alone: B's target state moves to the new
    instance (its writes reach the restarted A)."""
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"before-restart!!")
    restarted_and_reached(a, b, "MR-9 requires the target state to move to the new instance")


@pytest.mark.mc_req("MR-9")
@pytest.mark.mc_requires("engine_counters")
def test_new_instance_retires_old_endpoints(mc_engine):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"before-restart!!")
    before = dict(b.stats())
    old_id, new_id = restarted_and_reached(
        a, b, "MR-9 requires the target state to move to the new instance")
    after = dict(b.stats())
    assert after.get("replacements", 0) > before.get("replacements", 0), (
        f"B moved to the new A but counted no replacement (instance {short(old_id)} -> "
        f"{short(new_id)}); MR-9 requires detecting the instance change")
    assert after.get("endpoints_retired", 0) > before.get("endpoints_retired", 0), (
        f"after the peer restarted (instance {short(old_id)} -> {short(new_id)}), B retired no "
        f"endpoint of the old instance; MR-9 requires every old endpoint be retired")


def changes_without_cleanup(a, b, store, identity: str) -> None:
    """A's descriptor gains a buffer under the identity it had (``identity`` says which) and B
    refreshes it, forced and then by its TTL while it writes: B's writes keep landing and
    neither ``replacements`` nor ``endpoints_retired`` moves (MR-10)."""
    must_land(b, a, b"first-write-ok!!")
    before = dict(b.stats())
    changed = with_probe_buffer(published(store, "seg-a"), "same-instance-v2")
    plant(store, "seg-a", changed)
    b.lookup("seg-a", force=True)
    holds_for(lambda: lands(b, a, b"still-same-peer!"), 3 * SHORT_TTL_MS / 1000,
              f"B writing to A after A's descriptor changed under {identity}")
    after = dict(b.stats())
    for counter in ("replacements", "endpoints_retired"):
        assert after.get(counter, 0) == before.get(counter, 0), (
            f"{counter} went {before.get(counter, 0)} -> {after.get(counter, 0)} although A "
            f"published {identity} throughout (only its buffers changed); MR-10 forbids "
            f"replacement cleanup for the same instance_id")


@pytest.mark.mc_req("MR-10")
@pytest.mark.mc_requires("engine_counters")
def test_same_instance_never_triggers_cleanup(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    changes_without_cleanup(a, b, mc_metadata, "the same instance_id")


@pytest.mark.mc_req("MR-10")
@pytest.mark.mc_requires("engine_counters")
def test_a_legacy_peers_changed_descriptor_never_triggers_cleanup(mc_engine, mc_metadata):
    """The edge of "the same instance_id" where there is none: a peer that publishes no
    instance_id (a legacy peer, MR-8) changes its descriptor and B refreshes it. No ID on
    either side is no change of ID: for a legacy peer the RFC makes replacement detection
    unavailable (its endpoints go when a transfer fails, MR-14), so a refresh, whatever it
    brings, must not retire them."""
    a = mc_engine("seg-a")
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    changes_without_cleanup(a, b, mc_metadata, "no instance_id (a legacy peer)")


@pytest.mark.mc_req("MR-11")
@pytest.mark.mc_requires("engine_counters", "keep_addresses")
def test_replacement_detected_with_identical_addresses(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"before-restart!!")
    old = published(mc_metadata, "seg-a")
    before = dict(b.stats())
    a.restart(keep_addresses=True)
    new = published(mc_metadata, "seg-a")
    assert [x["addr"] for x in new["buffers"]] == [x["addr"] for x in old["buffers"]], (
        "precondition: the restarted A did not reuse its buffer addresses")
    try:
        wait_until(lambda: lands(b, a, b"after-restart!!!")
                   and b.stats().get("replacements", 0) > before.get("replacements", 0), WAIT,
                   "B, transferring to A, to detect the replacement")
    except Timeout:
        pytest.fail(
            f"A restarted with identical buffer addresses (instance {short(old.get('instance_id'))}"
            f" -> {short(new.get('instance_id'))}); {WAIT:g}s later B had not detected the "
            f"replacement; MR-11 requires detection even when addresses and keys are reused",
            pytrace=False)


def retried_write_lands(a, b) -> None:
    """With B's cached descriptor far from expiry, A restarts: B's next write must land in the
    new A (retire the failed endpoint, force a refresh, retry)."""
    must_land(b, a, b"before-restart!!")
    a.restart()
    seen = write_seen(b, a, b"retried-write-ok", call_deadline=CALL_DEADLINE)
    assert seen is None, (
        f"A restarted and B's cached descriptor (TTL {ttl_s(b, LONG_TTL_MS):g}s as B runs, far "
        f"from expiry) points at the dead process: {seen}, instead of B retiring the failed "
        f"endpoint, forcing a refresh and retrying (MR-12)")


@pytest.mark.mc_req("MR-12")
def test_transport_failure_forces_refresh_and_retries(mc_engine):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    retried_write_lands(a, b)


@pytest.mark.mc_req("MR-12")
def test_a_retried_read_returns_the_restarted_peers_bytes(mc_engine):
    """MR-12's retry on the read path: with B's cached descriptor far from expiry, A restarts
    and holds new bytes; B's read of the new A's own buffer must retire the failed endpoint,
    force a refresh, retry, and return what the new A holds (a success without them is no
    transfer)."""
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    must_land(b, a, b"before-restart!!")
    a.restart()
    held = b"held-by-the-restarted-A".ljust(32, b".")
    a.local_write(0, held)
    result = within(CALL_DEADLINE, b.read_at, "seg-a", a.buffers()[0][0], len(held),
                    what="a read")
    seen = (f"succeeded with {result.data!r}, not the {held!r} A holds," if result.ok
            else f"failed ({result.error})")
    assert result.ok and result.data == held, (
        f"A restarted and B's cached descriptor (TTL {ttl_s(b, LONG_TTL_MS):g}s as B runs, far "
        f"from expiry) points at the dead process; B's read of the new A's own buffer {seen} "
        f"instead of retiring the failed endpoint, forcing a refresh and retrying (MR-12)")


@pytest.mark.mc_req("MR-12")
@pytest.mark.mc_requires("engine_counters")
def test_transport_failure_recovery_counts_a_forced_refresh(mc_engine):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    forced_before = b.stats().get("refresh_forced", 0)
    retried_write_lands(a, b)
    assert b.stats().get("refresh_forced", 0) > forced_before, (
        "B recovered but counted no forced refresh (MR-12 recovers through a forced refresh)")


def write_to_dead_peer(a, b):
    """Kill A and write to it: the result, which must come back within CALL_DEADLINE."""
    must_land(b, a, b"peer-is-alive!!!")
    own = a.buffers()[0][0]
    a.kill()
    try:
        result = within(CALL_DEADLINE, b.write_at, "seg-a", own, b"nobody-home",
                        what="a write to a dead peer")
    except Timeout:
        pytest.fail(f"a write to a killed peer did not return within {CALL_DEADLINE:g}s; MR-12 "
                    f"requires bounded retries, never an unbounded loop", pytrace=False)
    assert not result.ok, "a write to a killed peer reported success"
    assert b.alive(), "B died writing to a killed peer"
    return result


@pytest.mark.mc_req("MR-12", "MR-16")
def test_retries_are_bounded_when_the_peer_is_gone(mc_engine):
    write_to_dead_peer(mc_engine("seg-a"), mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS))


@pytest.mark.mc_req("MR-12", "MR-15")
@pytest.mark.mc_requires("engine_counters")
def test_exhausted_retries_are_counted(mc_engine):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    exhausted_before = b.stats().get("retries_exhausted", 0)
    write_to_dead_peer(a, b)
    assert b.stats().get("retries_exhausted", 0) > exhausted_before, (
        "the write to a dead peer failed without counting an exhausted retry budget (MR-12, MR-15)")


@pytest.mark.mc_req("MR-14")
@pytest.mark.mc_demands("cache_ttl")
def test_legacy_peer_contents_still_refresh(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"legacy-peer-ok!!")
    a.restart()
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    bound = WAIT + ttl_s(b, SHORT_TTL_MS)
    try:
        wait_until(lambda: lands(b, a, b"legacy-restarted"), bound, "writes to the restarted peer")
    except Timeout:
        pytest.fail(
            f"a peer that publishes no instance_id restarted; {bound:g}s later (TTL "
            f"{ttl_s(b, SHORT_TTL_MS):g}s as B runs) B's writes to the new process's own buffer "
            f"still did not land; MR-14 requires TTL refresh to keep updating a legacy peer's "
            f"descriptor", pytrace=False)


@pytest.mark.mc_req("MR-14")
def test_legacy_peer_transport_failure_forces_refresh(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    must_land(b, a, b"legacy-peer-ok!!")
    a.restart()
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    result = within(CALL_DEADLINE, b.write_at, "seg-a", a.buffers()[0][0], b"legacy-recovered",
                    what="a write")
    assert result.ok and a.local_read(0, 16) == b"legacy-recovered", (
        f"a legacy peer (no instance_id) restarted; B's write failed ({result.error}) instead of "
        f"retiring the endpoint and forcing a refresh; MR-14 keeps failure-triggered recovery "
        f"for legacy peers")


@pytest.mark.mc_req("MR-15")
@pytest.mark.mc_requires("engine_counters")
def test_recovery_is_counted(mc_engine, proxied_metadata):
    proxy, via_proxy = proxied_metadata
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"observable-ok!!!")
    a.restart()
    b.lookup("seg-a", force=True)
    try:
        wait_until(lambda: lands(b, a, b"observable-new!!"), WAIT, "B to reach the restarted A")
    except Timeout:
        pytest.fail(f"A restarted; {WAIT:g}s later B's writes to the new process's own buffer "
                    f"still did not land (B's counters {b.stats()}); the replacement MR-15 asks "
                    f"to count never completed", pytrace=False)
    proxy.disable()
    b.lookup("seg-a", force=True)
    proxy.enable()
    stats = dict(b.stats())
    missing = [name for name in ("refresh_ok", "refresh_failed", "refresh_forced",
                                 "replacements", "endpoints_retired") if not stats.get(name)]
    assert not missing, (
        f"after a replacement, a forced refresh and a failed refresh, these counters of B are "
        f"still zero or absent: {missing} (all counters: {stats}); MR-15 requires operators can "
        f"see refreshes (ok/failed/forced), replacements and retired endpoints")


def looked_up_until(b, read, name: str, at_least: int, force: bool, failure: str) -> dict:
    """B looks A up (forced or not) until ``read()`` (its counters, or its log read as them)
    shows ``name`` at ``at_least``, within WAIT; else the test FAILs saying ``failure`` and what
    was read last. Returns that reading."""
    def reached() -> bool:
        b.lookup("seg-a", force=force)
        return read().get(name, 0) >= at_least

    try:
        wait_until(reached, WAIT, f"B's {name} to reach {at_least}")
    except Timeout:
        pytest.fail(f"{failure} (read: {dict(read())})", pytrace=False)
    return dict(read())


@pytest.mark.mc_req("MR-15")
@pytest.mark.mc_requires("engine_counters")
def test_refreshes_that_find_the_same_descriptor_count_no_replacement(mc_engine):
    """The edge of MR-15's "observable": counters an operator reads count events, not
    refreshes. B refreshes A's unchanged descriptor again and again (refresh_ok grows, past its
    TTL); no snapshot is counted as replaced and no replacement observed, until A really is
    replaced, which moves both."""
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"same-peer-twice!")
    base = dict(b.stats())
    after = looked_up_until(
        b, b.stats, "refresh_ok", base.get("refresh_ok", 0) + 3, False,
        f"B ({SHORT_TTL_MS} ms TTL) looked A up for {WAIT:g}s and its refresh_ok counter did not "
        f"grow by 3 (counters before {base}); MR-15 requires refreshes be observable")
    moved = {k: (base.get(k, 0), after.get(k, 0)) for k in ("snapshots_replaced", "replacements")
             if after.get(k, 0) != base.get(k, 0)}
    assert not moved, (
        f"B refreshed A's unchanged descriptor {after.get('refresh_ok', 0) - base.get('refresh_ok', 0)} "
        f"times and counted {moved} (before, after): MR-15's counters must count replaced "
        f"snapshots and replacements, not refreshes that found the same descriptor")
    restarted_and_reached(a, b, "A's replacement never reached B")
    replaced = dict(b.stats())
    assert replaced.get("snapshots_replaced", 0) > after.get("snapshots_replaced", 0), (
        f"A was replaced and B reached the new process, yet B's snapshots_replaced stayed at "
        f"{after.get('snapshots_replaced', 0)} (counters {replaced}); MR-15 requires a replaced "
        f"snapshot be counted")


@pytest.mark.mc_req("MR-15")
def test_the_log_tells_a_forced_refresh_from_an_ordinary_one(mc_engine, proxied_metadata):
    """MR-15's log must say which refreshes were forced (MR-5's kind) and which were the TTL's:
    with the metadata network cut, B's forced lookup of A fails and its log shows a forced
    refresh; then B's ordinary lookups past its TTL fail too, and none of them is logged as
    forced."""
    proxy, via_proxy = proxied_metadata
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"observable-ok!!!")
    proxy.disable()
    try:
        base = dict(b.log_events())
        forced = looked_up_until(
            b, b.log_events, "refresh_forced", base.get("refresh_forced", 0) + 1, True,
            f"B's forced lookups of A failed on a cut metadata network for {WAIT:g}s and its log "
            f"shows no forced refresh; MR-15 requires a forced refresh be visible")
        looked_up_until(
            b, b.log_events, "refresh_failed", forced.get("refresh_failed", 0) + 2, False,
            f"B looked A up past its TTL for {WAIT:g}s on a cut metadata network and its log "
            f"shows no further failed refresh; MR-15 requires failed refreshes be visible")
    finally:
        proxy.enable()
    after = dict(b.log_events())
    assert after.get("refresh_forced", 0) == forced.get("refresh_forced", 0), (
        f"B's ordinary lookups past its TTL failed "
        f"{after.get('refresh_failed', 0) - forced.get('refresh_failed', 0)} times and its log "
        f"counted {after.get('refresh_forced', 0) - forced.get('refresh_forced', 0)} of them as "
        f"forced refreshes; MR-15's log must tell the TTL's refreshes from forced ones")


LOGGED = {"a refresh": ("refresh_ok", "snapshots_replaced"), "a failed refresh":
          ("refresh_failed",), "a replacement": ("replacements",)}
"""What an operator must find in an engine's log, by event: the counters ``log_events`` reads
for it (MR-15)."""


@pytest.mark.mc_req("MR-15")
def test_recovery_is_visible_in_the_log(mc_engine, proxied_metadata):
    """MR-15 asks for log lines as well as counters: a build with no counter API is judged on
    its log alone. B goes through a replacement of A and refreshes that fail on a cut metadata
    network; its log must show each (``log_events``: the target's reading of its log)."""
    proxy, via_proxy = proxied_metadata
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"observable-ok!!!")
    restarted_and_reached(a, b, "the replacement MR-15 asks to see never completed")
    proxy.disable()

    def unseen() -> list[str]:
        lands(b, a, b"keep-refreshing!")  # a transfer past the TTL asks for a refresh
        events = b.log_events()
        return [what for what, names in LOGGED.items() if not any(events.get(n) for n in names)]

    bound = WAIT + 3 * ttl_s(b, SHORT_TTL_MS)
    try:
        wait_until(lambda: not unseen(), bound, "B's log to show its refreshes and the replacement")
    except Timeout:
        tail = "\n".join(b.logs().splitlines()[-12:])
        pytest.fail(
            f"B went through a replacement of A and {bound:g}s of refreshes failing on a cut "
            f"metadata network, yet its log shows no {', no '.join(unseen())} (read from it: "
            f"{dict(b.log_events())}); MR-15 requires operators can see refreshes "
            f"(ok/failed/forced), replacements and retired endpoints. Last lines of B's log:"
            f"\n{tail}", pytrace=False)
    finally:
        proxy.enable()


def connection_counts(a, b) -> dict[str, int] | str:
    """B's open connections to peers (all, and those to a replaced instance) and the live A's
    sessions on its data port, from the engines' stats; or why the target cannot tell."""
    try:
        sb, sa = b.stats(), a.stats()
    except TargetLacks as exc:
        return exc.reason
    missing = [k for k, st in (("peer_connections", sb), ("peer_connections_stale", sb),
                               ("data_sessions", sa)) if k not in st]
    if missing:
        return f"the engines report no {', '.join(missing)} in stats()"
    return {"b_to_peers": sb["peer_connections"], "b_stale": sb["peer_connections_stale"],
            "a_sessions": sa["data_sessions"]}


def assert_no_connection_leak(a, b, restarted: str, record_property) -> None:
    """MR-16's 'no endpoint leak', where the target reports connections: once B is idle, it
    holds no connection to the dead instance and exactly as many to A as the live A serves.
    Where it does not, only this check is left unjudged (the rest of the test still counts)."""
    first = connection_counts(a, b)
    if isinstance(first, str):
        note = f"MR-16 connection-leak check not judged on this target: {first}"
        record_property("unjudged", note)
        print(note)
        return
    seen: list[dict[str, int]] = [first]

    def settled() -> bool:
        counts = connection_counts(a, b)
        seen.append(counts)
        return counts["b_stale"] == 0 and counts["b_to_peers"] == counts["a_sessions"]

    try:
        wait_until(settled, WAIT, "B's connections to settle on the live A")
    except Timeout:
        last = seen[-1]
        pytest.fail(
            f"A was killed and restarted ({restarted}) and B's transfers recovered; {WAIT:g}s "
            f"after B went idle it still holds {last['b_to_peers']} connection(s) to A's data "
            f"ports, {last['b_stale']} of them to the dead instance, while the live A serves "
            f"{last['a_sessions']} session(s). Expected no connection to the dead instance and "
            f"B's count equal to the live A's; MR-16 requires recovery with no endpoint leak",
            pytrace=False)


@pytest.mark.mc_req("MR-16")
def test_peer_killed_and_restarted_recovers(mc_engine, record_property):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    must_land(b, a, b"before-the-kill!")
    old_id = a.descriptor().get("instance_id")
    outcomes: list[bool] = []
    stop = threading.Event()

    def keep_writing() -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            result = within(CALL_DEADLINE, b.write_at, "seg-a", a.buffers()[0][0],
                            b"background-write", what="a write")
            outcomes.append(result.ok)
            i += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        wait_until(lambda: len(outcomes) >= 3, WAIT, "B's background writes to start")
        a.kill()
        a.restart()
        wait_until(lambda: lands(b, a, b"after-the-kill!!"), WAIT,
                   "B's writes to reach A after kill -9 and restart")
    except Timeout as exc:
        pytest.fail(f"A was killed with SIGKILL and restarted under the same name; {exc}. MR-16 "
                    f"requires transfers to recover end to end", pytrace=False)
    finally:
        stop.set()
        writer.join(timeout=CALL_DEADLINE * 2)
    assert not writer.is_alive(), "B's writer hung: a transfer never returned (MR-16: no deadlock)"
    assert a.alive() and b.alive(), (
        f"after B's writes reached the restarted A, an engine died: A alive={a.alive()}, "
        f"B alive={b.alive()}")
    assert buffer_names(a.descriptor()), (
        f"the restarted A publishes no buffer: {a.descriptor()}")
    restarted = f"instance {short(old_id)} -> {short(a.descriptor().get('instance_id'))}"
    assert_no_connection_leak(a, b, restarted, record_property)
