"""MR-7, MR-8, MR-18: incarnation identity, wire compatibility, fresh snapshots of a new owner.

Stage 2 exit criteria of the metadata RFC: two restarts always produce different IDs; old
descriptors remain decodable; new descriptors stay readable by readers that ignore unknown
fields (the real 0.3.13 side of that is observed by the mooncake target and the compat suite).
"""

from __future__ import annotations

import json
import re
import secrets

import pytest

from pytest_mooncake import tcp_wire
from pytest_mooncake.planting import (
    buffer_names,
    described,
    in_0_3_11_form,
    plant,
    published,
    rpc_meta_key,
    with_probe_buffer,
    without_instance_id,
)
from pytest_mooncake.raw_peers import data_port_of, exchange
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


@pytest.mark.mc_req("MR-8")
def test_a_peer_in_the_0_3_11_form_is_transferred_with_both_ways(mc_engine, mc_metadata):
    """The oldest descriptor a reader meets in a rolling upgrade: 0.3.11 publishes no
    instance_id, no tcp_proto_version and no tcp_data_host. A reader takes the missing version
    as 1 (v1 framing: no status frames, no write acknowledgement) and the host from the
    segment's RPC entry (``mooncake-semantics.md`` 1.3, 1.4), and transfers both ways. A's
    descriptor is rewritten into that form; every target's data port serves v1 requests, as
    0.3.11's peers send them."""
    a = mc_engine("seg-a")
    old = in_0_3_11_form(published(mc_metadata, "seg-a"))
    plant(mc_metadata, "seg-a", old)
    b = mc_engine("seg-b")
    seen = b.lookup("seg-a")
    assert seen.ok, (
        f"B rejected A's descriptor in the 0.3.11 form (fields {sorted(old)}): {seen.error}; "
        f"MR-8 requires readers accept descriptors without instance_id")
    a.local_write(0, b"\0" * 16)
    written = b.write("seg-a", 0, b"to-0.3.11-form!!")
    assert written.ok, (
        f"B could not write to a peer that publishes the 0.3.11 form (no instance_id, no "
        f"tcp_proto_version, no tcp_data_host): {written.error}; MR-8 requires readers accept "
        f"descriptors without instance_id, in the protocol the descriptor names")
    lands(a, b"to-0.3.11-form!!")
    held = b"held-by-a-0.3.11-form-peer......"
    a.local_write(4096, held)
    pulled = b.read("seg-a", 4096, len(held))
    assert pulled.ok and pulled.data == held, (
        f"B's read of a peer that publishes the 0.3.11 form returned ok={pulled.ok} "
        f"data={pulled.data!r} error={pulled.error!r}; A holds {held!r} (MR-8)")


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


RPC_FIELDS = {"ip_or_host_name": str, "rpc_port": int}
"""The RPC entry's fields (``mooncake-semantics.md`` 1.4)."""


def rpc_entry(store, segment: str) -> dict | None:
    """``segment``'s RPC entry as stored now, decoded (None: absent)."""
    raw = store.get(rpc_meta_key(store, segment))
    return None if raw is None else json.loads(raw)


def entry_form_problems(entry: dict) -> list[str]:
    """How an RPC entry departs from ``{"ip_or_host_name": str, "rpc_port": uint}``."""
    problems = [f"{k} is {entry.get(k)!r}" for k, kind in RPC_FIELDS.items()
                if not isinstance(entry.get(k), kind) or isinstance(entry.get(k), bool)]
    if not problems and not (entry["ip_or_host_name"] and 0 < entry["rpc_port"] < 1 << 16):
        problems.append(f"host {entry['ip_or_host_name']!r}, port {entry['rpc_port']}")
    return problems


@pytest.mark.mc_req("MR-18")
@pytest.mark.mc_requires("engine_restart")
def test_new_owner_publishes_its_own_rpc_entry_not_its_predecessors(mc_engine, mc_metadata):
    """Beside its descriptor a process publishes its RPC entry (``rpc_meta/<segment>``: the host
    and port a Mooncake reader reaches the owner at; a reader of a descriptor with no
    tcp_data_host takes the host from it). The new owner of a name publishes its own and never
    leaves the predecessor's in place: a crashed predecessor on another host
    (192.0.2.1, TEST-NET-1) left its entry behind, as a SIGKILL does."""
    a = mc_engine("seg-a")
    key = rpc_meta_key(mc_metadata, "seg-a")
    first = rpc_entry(mc_metadata, "seg-a")
    assert first is not None, (
        f"A published its descriptor but no RPC entry under {key!r}; a Mooncake reader finds a "
        f"segment's owner there (MR-18: a process publishes a fresh snapshot of its own)")
    a.kill()  # no clean stop: what the predecessor published stays, as after a crash
    predecessor = {"ip_or_host_name": "192.0.2.1", "rpc_port": 9}
    mc_metadata.put(key, json.dumps(predecessor, separators=(",", ":")).encode())
    a.restart()
    fresh = rpc_entry(mc_metadata, "seg-a")
    assert fresh is not None, (
        f"the restarted owner of seg-a left no RPC entry under {key!r} (MR-18)")
    assert fresh != predecessor, (
        f"the restarted owner of seg-a left its predecessor's RPC entry {predecessor} under "
        f"{key!r}: readers would look for it at the dead process's host and port. MR-18 "
        f"requires a fresh snapshot of its own resources, never one inherited")
    bad = entry_form_problems(fresh)
    assert not bad, (
        f"the restarted owner's RPC entry {fresh} is not of the form "
        f'{{"ip_or_host_name": str, "rpc_port": 1..65535}}: {", ".join(bad)}')



@pytest.mark.mc_req("MR-18")
def test_a_read_across_the_end_of_a_buffer_is_answered_with_a_rejection_on_the_wire(
        mc_engine, mc_rng):
    """MR-18's straddling edge for a READ, where the answer itself is seen: a READ sent to A's
    data port for 16 bytes of which the first 8 are A's last 8 is rejected (v2: the rejection
    status, then the close; v1: the close alone) with none of A's bytes; the same READ moved 8
    bytes down, ending at the last byte, is answered with them. Each request is followed by a
    half-close (``raw_peers.exchange``), so the port answers and closes."""
    a = mc_engine("seg-a")
    endpoint, version = data_port_of(a)
    (addr, length), = a.buffers()[:1]
    tail = mc_rng.randbytes(16)
    a.local_write(length - 16, tail)
    ok = tcp_wire.STATUS_OK if version >= 2 else b""
    inside = exchange(endpoint, tcp_wire.request(tcp_wire.READ, addr + length - 16, 16, version))
    assert inside.data == ok + tail, (
        f"a v{version} READ of A's last 16 bytes (ending at its buffer's end) was answered with "
        f"{inside.data!r} ({inside.end}); expected {ok + tail!r}: MR-18 rejects only transfers "
        f"outside the registered buffers")
    across = exchange(endpoint, tcp_wire.request(tcp_wire.READ, addr + length - 8, 16, version))
    rejection = tcp_wire.STATUS_REJECTED if version >= 2 else b""
    assert across.data == rejection, (
        f"a v{version} READ of 16 bytes from 8 before the end of A's buffer was answered with "
        f"{across.data!r} ({across.end}); expected the rejection {rejection!r} and nothing of "
        f"A's memory: MR-18 requires the owner to reject transfers that address memory outside "
        f"the buffers it registered")
    assert a.alive(), "A died answering a READ across the end of its buffer"
