"""MP-7 and MP-8 judged on the master's own wire: a client the test controls call by call
(``MasterClusterHandle.wire_client``: its deadline, the protocol revision it speaks, the
version it offers), so a verdict separates what the master does from what a wheel's client
does with it (its retries, its own version check, its timeouts)."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import Timeout, wait_until

WAIT = 20.0
REATTACH_BOUND = 15.0
HUNG_CALL_DEADLINE = 2.0
"""The deadline our client puts on a call to a hung leader (far past a healthy answer)."""

pytestmark = [pytest.mark.mc_requires("master_cluster"), pytest.mark.mc_requires("master_wire")]


def semver(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def skewed(version: str, kind: str) -> str:
    """A version of ``kind`` relative to the masters' ``version`` (MP-8: same major is
    compatible)."""
    parsed = semver(version)
    if kind == "malformed" or parsed is None:
        return "not-a-version"
    major, minor = parsed
    if kind == "same-major":
        return f"{major}.{minor + 1}.0"
    return f"{major + 1}.0.0"


def said(answer) -> str:
    return "ok" if answer.get("ok") else str(answer.get("error"))


def new_lines(log: str, before: int, about: tuple[str, ...] = ()) -> list[str]:
    """Master log lines written since it had ``before`` lines, without the periodic metrics
    summary (which names every call); with ``about``, only lines naming one of those words."""
    lines = [line for line in log.splitlines()[before:] if "Metrics:" not in line]
    return [line for line in lines
            if not about or any(word in line.lower() for word in about)]


REFUSAL_WORDS = ("invalid", "error", "reject", "refus", "version", "mismatch")
"""A master-side line about a refused call names one of these (0.3.10's coro_rpc: "rpc
route/execute error, error msg: invalid rpc arg")."""


@pytest.mark.mc_req("MP-8")
@pytest.mark.parametrize("kind", ["other-major", "malformed"])
def test_a_client_offering_an_incompatible_version_is_refused_loudly_for_reads_and_writes(
        mc_master_cluster, kind):
    cluster = mc_master_cluster(masters=1, clients=0)
    own = cluster.wire_client()
    assert own.put("k-own", 64)["ok"], f"precondition: a client of the masters' own revision " \
                                       f"could not write: {said(own.put('k-own', 64))}"
    version = skewed(own.master_version, kind)
    leader = cluster.leader()
    before = len(cluster.master_log(leader).splitlines())
    skew = cluster.wire_client(version=version)
    write, read = skew.put("k-skewed", 64), skew.exists("k-own")
    if skew.offered_version is None:
        pytest.fail(f"a client of version {version} ({kind}) cannot be refused: the masters' "
                    f"RPC has no place for a client's version ({skew.version_channel}); it "
                    f"was served (write {said(write)}, read {said(read)}); MP-8 requires the "
                    f"master reject an incompatible client version master-side, with a log "
                    f"line naming it", pytrace=False)
    assert not write["ok"] and not read["ok"], (
        f"a client offering {version} ({kind}) got write {said(write)} and read {said(read)}; "
        f"MP-8 requires an incompatible client be refused for reads and writes alike")
    lines = new_lines(cluster.master_log(leader), before)
    assert any(version in line for line in lines), (
        f"the master refused a client offering {version} without a log line naming it "
        f"({len(lines)} new lines); MP-8 requires version skew be loud master-side")


@pytest.mark.mc_req("MP-8")
def test_a_client_offering_a_compatible_version_is_served_for_reads_and_writes(
        mc_master_cluster):
    cluster = mc_master_cluster(masters=1, clients=0)
    own = cluster.wire_client()
    assert own.put("k-own", 64)["ok"], "precondition: the masters' own revision could not write"
    version = skewed(own.master_version, "same-major")
    newer = cluster.wire_client(version=version)
    write, read = newer.put("k-newer", 64), newer.exists("k-own")
    assert write["ok"] and read["ok"] and read["result"]["exists"], (
        f"a client offering the compatible version {version} got write {said(write)} and "
        f"read {said(read)}; MP-8 requires compatible skew be accepted for reads and writes")


@pytest.mark.mc_req("MP-8")
def test_clients_of_every_protocol_revision_are_served_alike_for_reads_and_writes(
        mc_master_cluster):
    """A client of another release family (each speaks its own argument layout, as a
    not-yet-upgraded client would) must be served for reads and writes alike, or refused for
    both with a master-side log line: never read fine while its writes fail."""
    cluster = mc_master_cluster(masters=1, clients=0)
    own = cluster.wire_client()
    assert own.put("k-own", 64)["ok"], "precondition: the masters' own revision could not write"
    leader = cluster.leader()
    findings = []
    for revision in cluster.wire_revisions():
        if revision == own.own:
            continue
        before = len(cluster.master_log(leader).splitlines())
        other = cluster.wire_client(speaks=revision)
        write, read = other.put(f"k-{revision}", 64), other.exists("k-own")
        seen = f"revision {revision}: write {said(write)}, read {said(read)}"
        if bool(write["ok"]) != bool(read["ok"]):
            findings.append(f"{seen}: reads and writes differ, so a partial rollout looks "
                            f"healthy while {'writes' if read['ok'] else 'reads'} fail")
        elif not write["ok"] and not new_lines(cluster.master_log(leader), before,
                                               REFUSAL_WORDS):
            findings.append(f"{seen}: refused with no master-side log line")
    assert not findings, (
        f"masters speaking revision {own.own} (version {own.master_version!r}): "
        + "; ".join(findings) + "; MP-8 requires reads and writes behave alike and version "
        "skew be loud master-side")


def another_leader(cluster, old: int) -> int:
    """The index of a serving leader other than ``old`` (whose election key may still name it
    until its lease runs out), waited for up to WAIT s."""
    def other() -> list[int] | None:
        try:
            index = cluster.leader(timeout=1.0)
        except Timeout:
            return None
        return [index] if index != old else None

    try:
        return wait_until(other, WAIT, f"a master other than {old} to lead")[0]
    except Timeout:
        pytest.fail(f"precondition: no master other than the hung master {old} led within "
                    f"{WAIT:g}s", pytrace=False)


@pytest.mark.mc_req("MP-7")
def test_a_hung_leader_never_answers_and_the_new_leader_serves_a_client_that_gave_up(
        mc_master_cluster):
    """SIGSTOP the leader: a call to it ends only at our client's own deadline (the master
    never answers), and a client that gives up there is served by the new leader within the
    bound. What the wheel's client does meanwhile is test_clients.py's verdict."""
    cluster = mc_master_cluster(masters=2, clients=0)
    old = cluster.leader(timeout=WAIT)
    stuck = cluster.wire_client(old)
    assert stuck.put("before-hang", 64)["ok"], "precondition: no write through the leader"
    cluster.pause_master(old)
    try:
        new = another_leader(cluster, old)
        # asked once another leader serves: SIGSTOP reaches each thread as it is next
        # scheduled, so a call sent right after the signal may still be answered
        hung = stuck.ping(timeout=HUNG_CALL_DEADLINE)
        assert hung.get("timed_out"), (
            f"a ping to the SIGSTOPped leader answered {said(hung)} instead of timing out at "
            f"our {HUNG_CALL_DEADLINE:g}s deadline (precondition: the leader is hung)")
        answers = []

        def writes() -> bool:
            answers.append(cluster.wire_client(new, timeout=HUNG_CALL_DEADLINE)
                           .put("after-hang", 64))
            return bool(answers[-1]["ok"])

        try:
            wait_until(writes, REATTACH_BOUND, "the new leader to serve a write")
        except Timeout:
            pytest.fail(f"the leader (master {old}) hung and master {new} took over, yet a "
                        f"client that gave up on the hung leader at its "
                        f"{HUNG_CALL_DEADLINE:g}s deadline could not write through master "
                        f"{new} within {REATTACH_BOUND:g}s ({len(answers)} tries, the last: "
                        f"{said(answers[-1])}); MP-7 requires clients reattach to the new "
                        f"leader within a bounded time", pytrace=False)
    finally:
        cluster.kill_master(old)
