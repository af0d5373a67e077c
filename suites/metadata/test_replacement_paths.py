"""MR-8, MR-9, MR-11, MR-14 on their failure paths and boundaries: what a replacement must
leave behind (no connection to the old instance, whatever address the new one listens at),
what a legacy peer must still get (TTL refresh of its contents, a retired endpoint after a
transport failure), and which instance IDs a reader must accept (any opaque value of 128 bits
or more, not only our own hex).

Connections are observed from outside: the engines' TCP sockets as ``/proc`` shows them
(``sockets()`` of the handle). A connection of B to the old A is a socket of B whose other end
was a socket of the old A process; once B has seen the new instance it must close every one of
them (MR-9: every endpoint of the old instance is retired). A target whose engines hold no
connection between transfers leaves that check unjudged, and says so.
"""

from __future__ import annotations

import base64
import uuid

import pytest

from pytest_mooncake.landed_writes import lands
from pytest_mooncake.planting import described, plant, published, shows, with_probe_buffer
from pytest_mooncake.planting import without_instance_id as legacy
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.waits import Timeout, wait_until

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000
CALL_DEADLINE = 30.0
LANDS = 5.0

pytestmark = pytest.mark.mc_requires("engine")


def ttl_s(engine, asked_ms: float) -> float:
    ttl = engine.cache_ttl_ms
    return (asked_ms if ttl is None else ttl) / 1000


Conn = tuple[tuple[str, int], tuple[str, int]]


def connections(b, a) -> set[Conn]:
    """(local, remote) of each of B's TCP connections whose other end is a socket of A's
    current process."""
    ends = {(s.local, s.remote) for s in a.sockets() if not s.listening}
    return {(s.local, s.remote) for s in b.sockets() if (s.remote, s.local) in ends}


def states(b, conns: set[Conn]) -> list[str]:
    return [f"{s.local[1]}->{s.remote[1]} {s.state}" for s in b.sockets()
            if (s.local, s.remote) in conns]


def unjudged(record_property, note: str) -> None:
    record_property("unjudged", note)
    print(note)


def sees_new_instance(b, new: dict, old: dict, target) -> None:
    """Wait (TTL + WAIT) until B's lookups of seg-a serve A's new descriptor, without any
    transfer (a transfer could meet the old connections and close them on its own account).
    n/a where what a lookup reveals cannot tell the new descriptor from the old one."""
    first = b.lookup("seg-a")
    if first.partial and shows(first, old) and shows(first, new):
        raise TargetLacks("cache_control", (
            f"{target.version}: B's lookup reveals only {described(first)} of seg-a, the same "
            f"for the old and the new instance: the run cannot tell when B has seen the "
            f"replacement"))
    comes_to_serve(b, new, f"A restarted (instance {short(old)} -> {short(new)})",
                   "MR-9 requires the target state to move to the new instance")


def comes_to_serve(b, doc: dict, happened: str, required: str) -> None:
    """B's lookups of seg-a serve ``doc`` within its TTL + WAIT; else FAIL saying what
    ``happened`` to seg-a, what B still serves and what is ``required``."""
    bound = WAIT + ttl_s(b, SHORT_TTL_MS)
    try:
        wait_until(lambda: shows(b.lookup("seg-a"), doc), bound,
                   "B's lookups to serve seg-a's new descriptor")
    except Timeout:
        pytest.fail(
            f"{happened}; {bound:g}s later (TTL {ttl_s(b, SHORT_TTL_MS):g}s as B runs) B's "
            f"lookups still serve {described(b.lookup('seg-a'))}; {required}", pytrace=False)


def short(doc: dict) -> str:
    iid = doc.get("instance_id")
    return f"{iid[:8]}.." if iid else "none"


@pytest.mark.mc_req("MR-9", "MR-11")
@pytest.mark.mc_requires("engine_restart", "cache_control")
@pytest.mark.parametrize("keep_addresses", [
    pytest.param(False, id="new-address"),
    pytest.param(True, id="same-address", marks=pytest.mark.mc_requires("keep_addresses"))])
def test_replacement_closes_connections_to_the_old_instance(mc_engine, mc_metadata, mc_target,
                                                            keep_addresses, record_property):
    """B held connections to A; A is replaced (at a new data address, or at the very same one:
    MR-11) and B's lookups see the new instance. Every connection B had to the old process
    must be closed, before any transfer meets it: an idle connection to a dead incarnation is
    an endpoint of the old instance that was never retired (MR-9), and at the same address the
    next transfer would run into it."""
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    assert lands(b, a, b"before-restart!!", lands_s=LANDS), "B cannot write to A at all"
    held = connections(b, a)
    old = published(mc_metadata, "seg-a")
    a.restart(keep_addresses=keep_addresses)
    new = published(mc_metadata, "seg-a")
    assert new.get("instance_id") != old.get("instance_id") or "instance_id" not in old, (
        "precondition: the restarted A published the old instance_id")
    sees_new_instance(b, new, old, mc_target)
    if not held:
        unjudged(record_property, "MR-9 old-connection check not judged: B held no TCP "
                 "connection to A's process between transfers")
    else:
        try:
            wait_until(lambda: not held & {(s.local, s.remote) for s in b.sockets()}, WAIT,
                       "B to close its connections to the old A")
        except Timeout:
            pytest.fail(
                f"A was replaced ({'same' if keep_addresses else 'new'} data address, instance "
                f"{short(old)} -> {short(new)}) and B's lookups serve the new instance; {WAIT:g}s "
                f"later B still holds {len(held & {(s.local, s.remote) for s in b.sockets()})} "
                f"of the {len(held)} connection(s) it had to the old process "
                f"({states(b, held)}). MR-9 requires every endpoint of the old instance be "
                f"retired when the instance_id changes" + (
                    "; MR-11 even when the new instance reuses the old addresses"
                    if keep_addresses else ""), pytrace=False)
    assert lands(b, a, b"after-restart!!!", lands_s=LANDS), (
        "B's lookups serve the new A, yet its write to the new A's own buffer did not land")


@pytest.mark.mc_req("MR-14")
@pytest.mark.mc_requires("cache_control")
@pytest.mark.mc_demands("cache_ttl")
def test_a_legacy_peers_changed_contents_are_refreshed_after_the_ttl(mc_engine, mc_metadata):
    """No transfer fails here: only the TTL can bring B the legacy peer's new contents (MR-14:
    TTL refresh still updates contents of a peer without instance_id)."""
    mc_engine("seg-a")
    first = legacy(published(mc_metadata, "seg-a"))
    plant(mc_metadata, "seg-a", first)
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    assert shows(b.lookup("seg-a"), first), (
        f"B could not resolve a peer without instance_id: {described(b.lookup('seg-a'))}")
    v2 = legacy(with_probe_buffer(first, "legacy-v2", first=True))
    plant(mc_metadata, "seg-a", v2)
    comes_to_serve(b, v2, "a peer without instance_id changed its descriptor",
                   "MR-14 requires TTL refresh to keep updating a legacy peer's contents (it is "
                   "not cached until a transfer fails)")


@pytest.mark.mc_req("MR-14")
@pytest.mark.mc_requires("engine_restart", "engine_counters")
def test_a_legacy_peers_transport_failure_retires_its_endpoint(mc_engine, mc_metadata):
    """A legacy peer restarts at a new address while B's cached descriptor is far from expiry:
    B's write fails on the old endpoint, and B must retire that endpoint and force a refresh
    (MR-14), as it would for a peer with an instance_id (MR-12)."""
    a = mc_engine("seg-a")
    plant(mc_metadata, "seg-a", legacy(published(mc_metadata, "seg-a")))
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    assert lands(b, a, b"legacy-peer-ok!!", lands_s=LANDS), "B cannot write to a legacy peer at all"
    before = dict(b.stats())
    a.restart()
    plant(mc_metadata, "seg-a", legacy(published(mc_metadata, "seg-a")))
    assert lands(b, a, b"legacy-recovered", lands_s=LANDS), (
        "a legacy peer restarted and B's write to its new process did not land (MR-14 keeps "
        "failure-triggered recovery for legacy peers)")
    after = dict(b.stats())
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in ("endpoints_retired", "refresh_forced")}
    assert grew["refresh_forced"] > 0, (
        f"B recovered from a transport failure to a legacy peer without counting a forced "
        f"refresh (counters moved {grew}); MR-14 requires the failure force a refresh")
    assert grew["endpoints_retired"] > 0, (
        f"B's write to a legacy peer failed on its old endpoint and B recovered, yet it retired "
        f"no endpoint (counters moved {grew}); MR-14 requires a transport failure to a peer "
        f"without instance_id still retire the failed endpoint")


def opaque_ids(rng) -> dict[str, str]:
    """Instance IDs a correct writer may publish (MR-7 asks for >= 128 random bits and nothing
    about their spelling), none of them our own lowercase hex of exactly 128 bits."""
    return {
        "a UUID with dashes": str(uuid.UUID(int=rng.getrandbits(128))),
        "256 bits of hex": f"{rng.getrandbits(256):064x}",
        "256 bits of base64url": base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("="),
        "128 bits of upper-case hex": f"{rng.getrandbits(128):032X}",
    }


@pytest.mark.mc_req("MR-8")
@pytest.mark.mc_requires("cache_control")
def test_opaque_instance_ids_are_read(mc_engine, mc_metadata, mc_rng):
    """MR-8: readers accept descriptors with an ``instance_id`` - an opaque value (the RFC's
    "opaque process identity"), which a reader compares and never parses: an ID spelt
    differently from ours, or longer than 128 bits, is still a peer's identity. Each ID is read
    by a reader that starts after it was planted, so its first lookup must fetch and decode it
    (no cache, TTL or forced refresh involved)."""
    a = mc_engine("seg-a")
    base = published(mc_metadata, "seg-a")
    for n, (what, iid) in enumerate(opaque_ids(mc_rng).items()):
        plant(mc_metadata, "seg-a", dict(base, instance_id=iid))
        reader = mc_engine(f"seg-r{n}")
        seen = reader.lookup("seg-a")
        assert seen.ok, (
            f"a reader rejected A's descriptor whose instance_id is {what} ({iid!r}): "
            f"{seen.error}; MR-8 requires readers accept descriptors with an instance_id, an "
            f"opaque value")
        if not seen.partial and "instance_id" in seen.descriptor:
            assert seen.descriptor["instance_id"] == iid, (
                f"A published instance_id {what} ({iid!r}); the reader reports "
                f"{seen.descriptor['instance_id']!r} (MR-8: an opaque value, read as it is)")
        assert lands(reader, a, f"opaque-id-{n}-{iid[:4]}".encode(), lands_s=LANDS), (
            f"with instance_id {what} ({iid!r}) in A's descriptor, a reader's write to A did not "
            f"land (MR-8)")
