"""MR-7, MR-8, MR-18: incarnation identity, wire compatibility, fresh snapshots of a new owner.

Stage 2 exit criteria of the metadata RFC: two restarts always produce different IDs; old
descriptors remain decodable; new descriptors stay readable by readers that ignore unknown
fields (the real 0.3.13 side of that is observed by the mooncake target and the compat suite).
"""

from __future__ import annotations

import re
import secrets

import pytest

from pytest_mooncake.planting import (
    buffer_names,
    described,
    plant,
    published,
    with_probe_buffer,
    without_instance_id,
)
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.waits import Timeout, wait_until

HEX128 = re.compile(r"^[0-9a-f]{32,}$")
PREDECESSOR_ID = "5eed" * 8
"""The instance_id planted as a crashed predecessor's."""
LANDS = 5.0
WAIT = 10.0
SHORT_TTL_MS = 200


def lands(a, payload: bytes) -> None:
    """An acknowledged write's bytes are in A's buffer. Mooncake 0.3.10/0.3.11 speak TCP protocol
    v1 (no tcp_proto_version), which acknowledges a write before its bytes land: wait for them."""
    wait_until(lambda: a.local_read(0, len(payload)) == payload, LANDS,
               f"the acknowledged write of {payload!r} to land in A's buffer",
               describe=lambda _: repr(a.local_read(0, len(payload))))


pytestmark = pytest.mark.mc_requires("engine")


@pytest.mark.mc_req("MR-7")
def test_instance_id_is_random_per_process_and_stable_within_it(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    first = published(mc_metadata, "seg-a").get("instance_id")
    assert first is not None, (
        "A published no instance_id in its descriptor; MR-7 requires every process to publish "
        "a random instance_id of at least 128 bits")
    assert isinstance(first, str) and HEX128.match(first.lower()), (
        f"instance_id {first!r} is not at least 128 bits of hex (MR-7)")
    assert a.descriptor().get("instance_id") == first, "A's own view and the store disagree"
    ids = [first]
    for _ in range(3):
        a.restart()
        ids.append(published(mc_metadata, "seg-a").get("instance_id"))
    assert len(set(ids)) == len(ids), (
        f"instance_ids over four starts of seg-a were {[i and i[:8] for i in ids]}: MR-7 "
        f"requires a different ID on every process start")
    again = published(mc_metadata, "seg-a").get("instance_id")
    assert again == ids[-1], "instance_id changed within one process lifetime (MR-7)"
    shared = _shared_chunks(ids)
    assert not shared, (
        f"instance_ids of four starts of seg-a agree in {shared[0]}: IDs of 128 random bits "
        f"share a 32-bit chunk with probability 2^-32 per pair; these carry fewer random bits "
        f"(a clock, a counter, padding). MR-7 requires at least 128 random bits with no "
        f"ordering or clock meaning: {ids}")


def _shared_chunks(ids: list[str], width: int = 8) -> list[str]:
    """Chunks of ``width`` hex digits (32 bits) at the same position that two IDs share."""
    n = min(len(i) for i in ids)
    found = []
    for x, left in enumerate(ids):
        for right in ids[x + 1:]:
            found += [f"hex digits {p}..{p + width - 1} ({left[p:p + width]!r}) of "
                      f"{left[:8]}.. and {right[:8]}.." for p in range(0, n - width + 1, width)
                      if left[p:p + width].lower() == right[p:p + width].lower()]
    return found


@pytest.mark.mc_req("MR-7")
@pytest.mark.mc_requires("register_memory")
def test_a_republish_within_a_process_keeps_its_instance_id(mc_engine, mc_metadata):
    """Registering more memory republishes the descriptor (Mooncake's ``register_memory``):
    the same process, so the same identity, whatever code path builds the new descriptor."""
    a = mc_engine("seg-a")
    ids = [published(mc_metadata, "seg-a").get("instance_id")]
    assert ids[0] is not None, (
        "A published no instance_id in its descriptor; MR-7 requires every process to publish "
        "one, made once at its start")
    for _ in range(2):
        addr, _length = a.register_buffer(64 << 10)
        now = published(mc_metadata, "seg-a")
        assert addr in [b.get("addr") for b in now.get("buffers", [])], (
            f"A registered a buffer at {addr:#x} but its published descriptor lists only "
            f"{[hex(b.get('addr', 0)) for b in now.get('buffers', [])]}: it did not republish")
        ids.append(now.get("instance_id"))
    assert len(set(ids)) == 1, (
        f"seg-a's instance_id changed within one process as it republished its descriptor: "
        f"{[i and i[:8] for i in ids]}; MR-7 requires it be made once at process start and "
        f"stay constant for the process lifetime")


@pytest.mark.mc_req("MR-8")
def test_descriptor_without_instance_id_is_read_as_a_legacy_peer(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b")
    plant(mc_metadata, "seg-a", without_instance_id(published(mc_metadata, "seg-a")))
    seen = b.lookup("seg-a", force=True)
    if not seen.ok:
        seen = b.lookup("seg-a")
    assert seen.ok, f"B rejected a descriptor without instance_id: {seen.error} (MR-8)"
    assert "instance_id" not in seen.descriptor, (
        f"B reports instance_id {seen.descriptor.get('instance_id')!r} for a peer that published "
        f"none; MR-8 says a missing ID marks a legacy peer and no ID is synthesized")
    a.local_write(0, b"\0" * 16)
    written = b.write("seg-a", 0, b"legacy-peer-ok!!")
    assert written.ok, f"B could not write to a peer that publishes no instance_id: {written.error}"
    lands(a, b"legacy-peer-ok!!")


@pytest.mark.mc_req("MR-8")
@pytest.mark.mc_requires("cache_control", "engine_counters")
def test_a_peer_whose_descriptor_loses_its_instance_id_is_marked_legacy(mc_engine, mc_metadata):
    """The second edge of "a missing ID marks a legacy peer": not a peer B first meets without
    an ID, but one B knew with an ID that now publishes none (a rollback to a pre-RFC writer).
    That descriptor lacks an ID as much as a first one does: B marks the peer legacy (its
    ``legacy_peers`` counter, the mark the mixed-engines test reads) and serves it with no ID,
    neither synthesized nor kept from before."""
    mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=SHORT_TTL_MS)
    known = published(mc_metadata, "seg-a")
    known.setdefault("instance_id", secrets.token_hex(16))  # a legacy writer publishes none
    plant(mc_metadata, "seg-a", known)
    first = b.lookup("seg-a")
    assert first.ok and (first.descriptor or {}).get("instance_id") == known["instance_id"], (
        f"precondition: B did not resolve A with its instance_id: {described(first)}")
    before = b.stats().get("legacy_peers", 0)
    dropped = without_instance_id(with_probe_buffer(known, "published-without-an-id", first=True))
    plant(mc_metadata, "seg-a", dropped)
    b.lookup("seg-a", force=True)
    bound = WAIT + 2 * SHORT_TTL_MS / 1000

    def took_up() -> bool:
        seen = b.lookup("seg-a")
        return seen.ok and buffer_names(dict(seen.descriptor or {})) == buffer_names(dropped)

    try:
        wait_until(took_up, bound, "B to serve A's descriptor published without instance_id")
    except Timeout:
        raise TargetLacks("cache_ttl", (
            f"B never took up A's changed descriptor within {bound:g}s, forced or by its TTL "
            f"(it serves {described(b.lookup('seg-a'))}): no reader here reads the value this "
            f"edge is about (MR-1 and MR-5 judge the refresh itself)")) from None
    seen = b.lookup("seg-a")
    assert "instance_id" not in (seen.descriptor or {}), (
        f"A's descriptor now carries no instance_id, yet B serves it with "
        f"{seen.descriptor.get('instance_id')!r}; MR-8: a missing ID marks a legacy peer and no "
        f"ID is synthesized")
    after = b.stats().get("legacy_peers", 0)
    assert after > before, (
        f"B read A's descriptor without instance_id (A had published "
        f"{known['instance_id'][:8]}.. before) but legacy_peers stayed at {before}; MR-8: a "
        f"missing ID marks a legacy peer, also one that had an ID")


@pytest.mark.mc_req("MR-8")
def test_unknown_fields_are_accepted(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b")
    doc = published(mc_metadata, "seg-a")
    doc["future_field"] = {"nested": [1, 2, 3]}
    doc["buffers"][0]["future_buffer_field"] = "x"
    plant(mc_metadata, "seg-a", doc)
    seen = b.lookup("seg-a", force=True)
    if not seen.ok:
        seen = b.lookup("seg-a")
    assert seen.ok, f"B rejected a descriptor with unknown fields: {seen.error} (MR-8)"
    assert b.write("seg-a", 0, b"unknown-fields!!").ok
    lands(a, b"unknown-fields!!")


@pytest.mark.mc_req("MR-18")
@pytest.mark.mc_requires("engine_restart")
def test_new_owner_publishes_only_its_own_buffers(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    doc = published(mc_metadata, "seg-a")
    foreign = dict(doc, buffers=doc["buffers"] + [
        {"name": "predecessor-only", "addr": 1 << 44, "length": 1 << 20}],
        instance_id=PREDECESSOR_ID)
    a.kill()  # no clean stop: the predecessor's value stays in the store, as after a crash
    plant(mc_metadata, "seg-a", foreign)
    a.restart()
    fresh = published(mc_metadata, "seg-a")
    assert fresh.get("instance_id") != PREDECESSOR_ID, (
        "the new owner of seg-a republished its predecessor's instance_id from the value it "
        "found in the store; MR-18 requires a fresh snapshot of its own, MR-7 an ID made at "
        "its own start")
    own = sorted(addr for addr, _ in a.buffers())
    assert "predecessor-only" not in buffer_names(fresh), (
        "the restarted owner of seg-a republished a buffer only its predecessor's value had; "
        "MR-18 requires a fresh snapshot of its own resources, never a merge")
    assert sorted(b["addr"] for b in fresh["buffers"]) == own, (
        f"published buffers {[hex(b['addr']) for b in fresh['buffers']]} are not the process's "
        f"own {[hex(x) for x in own]} (MR-18)")


@pytest.mark.mc_req("MR-18")
def test_access_outside_registered_buffers_is_rejected(mc_engine):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b")
    (addr, length), = a.buffers()[:1]
    before = a.local_read(0, 16)
    outside = b.write_at("seg-a", addr + length, b"x" * 16)
    assert not outside.ok, (
        "a write just past A's registered buffer was accepted; MR-18 requires the owner to "
        "reject transfers that address memory outside the buffers it registered")
    at_the_end = b.write_at("seg-a", addr + length - 16, b"z" * 16)
    assert at_the_end.ok, (
        f"a write of the last 16 bytes of A's registered buffer (ending exactly at its end) was "
        f"refused: {at_the_end.error}; MR-18 rejects only transfers outside the registered "
        f"buffers")
    assert a.local_read(length - 16, 16) == b"z" * 16, "the write of the last 16 bytes was lost"
    straddling = b.write_at("seg-a", addr + length - 8, b"y" * 16)
    assert not straddling.ok, "a write straddling the end of A's buffer was accepted (MR-18)"
    assert a.alive(), "A crashed on an out-of-bounds transfer"
    assert a.local_read(0, 16) == before
    assert a.local_read(length - 8, 8) == b"z" * 8, "the rejected write was partially applied"
    smallest = b.write_at("seg-a", addr + length - 1, b"q")
    assert smallest.ok, (
        f"a 1-byte write of the last byte of A's registered buffer was refused: "
        f"{smallest.error}; MR-18 rejects only transfers outside the registered buffers, and "
        f"the smallest transfer inside them is one byte")
    assert a.local_read(length - 1, 1) == b"q", "the 1-byte write of the last byte was lost"


@pytest.mark.mc_req("MR-18")
def test_access_at_and_across_the_start_of_a_buffer(mc_engine):
    """The start of the range: a write of A's first byte, and one wholly inside the buffer, are
    accepted; a write straddling the start, one ending just before it and one further below
    it are rejected and apply nothing, anywhere in the buffer."""
    a = mc_engine("seg-a")
    b = mc_engine("seg-b")
    (addr, length), = a.buffers()[:1]
    assert length >= 64, f"precondition: A's first buffer is {length} bytes"
    near = [(x, n) for x, n in a.buffers() if x != addr and x < addr <= x + n + 64]
    assert not near, f"precondition: A registered {near} right below its first buffer at {addr:#x}"
    first = b.write_at("seg-a", addr, b"f")
    assert first.ok, (
        f"a 1-byte write of the first byte of A's registered buffer was refused: {first.error}; "
        f"MR-18 rejects only transfers outside the registered buffers")
    inside = b.write_at("seg-a", addr + 16, b"i" * 16)
    assert inside.ok, f"a write inside A's registered buffer was refused: {inside.error}"
    assert a.local_read(0, 1) + a.local_read(16, 16) == b"f" + b"i" * 16, (
        "the accepted writes did not land")
    before = a.local_read(0, 32)
    straddling = b.write_at("seg-a", addr - 8, b"s" * 16)
    assert not straddling.ok, (
        "a write straddling the start of A's buffer (8 bytes before it, 8 in it) was accepted; "
        "MR-18 requires the owner to reject transfers that address memory outside its buffers")
    below = b.write_at("seg-a", addr - 16, b"b" * 16)
    assert not below.ok, ("a write of the 16 bytes just before A's buffer was accepted (MR-18)")
    tail = a.local_read(length - 64, 64)
    further = b.write_at("seg-a", addr - 64, b"w" * 16)
    assert not further.ok, (
        "a write of 16 bytes 64 bytes before A's buffer was accepted; MR-18 requires the owner "
        "to reject transfers that address memory outside its buffers")
    assert a.alive(), "A crashed on an out-of-bounds transfer"
    assert a.local_read(0, 32) == before, "a rejected write was partially applied"
    assert a.local_read(length - 64, 64) == tail, (
        "a rejected write below A's buffer changed the end of the buffer")
