"""MR-8 between two real implementations on the same etcd, in both writer/reader roles:
the target under test against the reference engine (the shipped skew matrix mixed-engines, so a
release's column judges that release), and real releases against each other
(release-engines, each pair in its reader's column).

The writer publishes its descriptor; the reader resolves it from the shared etcd and transfers
both ways (writes into the writer's buffer, reads back what the writer holds). With a real
release as reader, that is MR-8's last clause observed on the release itself: descriptors that
carry fields it does not know (``instance_id``, a newer release's ``metadata_version``) stay
decodable. With the reference (rfc) as reader of a release's descriptors (no ``instance_id``;
0.3.11/0.3.12 also no ``tcp_data_host``), it is the first two: the descriptor is accepted, the
peer is a legacy peer and no ID is synthesized. Where a build is not available, its pairs are
n/a with the target's reason.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from pytest_mooncake.waits import Timeout, wait_until

WAIT = 15.0


def published(engine) -> dict:
    raw = engine.raw_descriptor()
    assert raw is not None, f"precondition: {engine.segment} published no descriptor"
    return json.loads(raw)


@pytest.mark.mc_req("MR-8")
@pytest.mark.mc_skew("mixed-engines", "release-engines")
def test_mixed_engines_read_each_others_descriptors_and_transfer_both_ways(mc_skew):
    writer_t = mc_skew.require("writer", "engine", "metadata_etcd")
    reader_t = mc_skew.require("reader", "engine", "metadata_etcd")
    writer_name = mc_skew.implementation("writer").name
    reader_name = mc_skew.implementation("reader").name
    writer_meta, reader_meta = writer_t.metadata_store("etcd"), reader_t.metadata_store("etcd")
    assert writer_meta.address == reader_meta.address, (
        f"precondition: the writer's metadata store is {writer_meta.address} and the reader's "
        f"{reader_meta.address}; a mixed pair shares one etcd")
    # Fresh names per run: real releases merge a killed predecessor's buffers into a new one.
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    writer = writer_t.start_engine(f"mixed-w-{tag}", writer_meta)
    reader = reader_t.start_engine(f"mixed-r-{tag}", reader_meta)
    judge_pair(writer, reader, writer_name, reader_name, reader_t, writer.segment,
               "from the shared etcd")


@pytest.mark.mc_req("MR-8")
@pytest.mark.mc_skew("mixed-engines", "release-engines")
def test_mixed_engines_on_p2p_handshake_transfer_both_ways(mc_skew):
    """The same pair with no store (P2PHANDSHAKE): the reader asks the writer itself for its
    descriptor on the writer's RPC port (a Metadata handshake frame), so the two
    implementations must speak one handshake as well as one descriptor format."""
    writer_t = mc_skew.require("writer", "engine", "metadata_p2p")
    reader_t = mc_skew.require("reader", "engine", "metadata_p2p")
    writer_meta, reader_meta = writer_t.metadata_store("p2p"), reader_t.metadata_store("p2p")
    try:
        writer = writer_t.start_engine("mixed-w", writer_meta)
        reader = reader_t.start_engine("mixed-r", reader_meta)
        judge_pair(writer, reader, mc_skew.implementation("writer").name,
                   mc_skew.implementation("reader").name, reader_t, writer.segment_name,
                   f"by a P2P handshake with {writer.segment_name}")
    finally:
        writer_meta.close()
        reader_meta.close()


def judge_pair(writer, reader, writer_name: str, reader_name: str, reader_t, peer: str,
               how: str) -> None:
    """The reader resolves the writer (``peer`` is the name it knows it by, ``how`` says
    through what) and they transfer both ways."""
    doc = published(writer)
    where = (f"{writer_name} writer {peer} (descriptor fields {sorted(doc)}), "
             f"{reader_name} reader {reader.segment}")

    seen = reader.lookup(peer)
    assert seen.ok, (
        f"{where}: the reader could not resolve the writer's descriptor {how} "
        f"({seen.error}); MR-8 requires readers accept descriptors with and without instance_id "
        f"and 0.3.13 readers decode descriptors with fields they do not know")
    first = doc["buffers"][0]["addr"]
    got = seen.descriptor.get("buffers", [{}])[0].get("addr")
    assert got == first, (
        f"{where}: the reader resolved the writer's first buffer at {got!r}, the writer "
        f"published {first:#x}; MR-8 requires the descriptor be decoded, not misread")
    if "instance_id" not in doc:
        assert "instance_id" not in seen.descriptor, (
            f"{where}: the writer published no instance_id but the reader reports "
            f"{seen.descriptor.get('instance_id')!r}; MR-8 says a missing ID marks a legacy "
            f"peer and no ID is synthesized")
        if reader_t.missing("engine_counters") is None:
            legacy = reader.stats().get("legacy_peers", 0)
            assert legacy >= 1, (
                f"{where}: the reader resolved a descriptor without instance_id but counts "
                f"legacy_peers={legacy}; MR-8 requires a missing ID mark the peer as legacy")

    pushed = f"{reader_name}->{writer_name}".encode().ljust(32, b".")
    writer.local_write(0, b"\0" * len(pushed))
    try:
        wait_until(lambda: reader.write(peer, 0, pushed).ok
                   and writer.local_read(0, len(pushed)) == pushed, WAIT,
                   "the reader's write to land in the writer's buffer")
    except Timeout:
        last = reader.write(peer, 0, pushed)
        pytest.fail(f"{where}: for {WAIT:g}s the reader's writes into the writer's buffer did "
                    f"not land (last: ok={last.ok}, error={last.error!r}, writer holds "
                    f"{writer.local_read(0, len(pushed))!r}); MR-8 requires a mixed pair keep "
                    f"transferring across the descriptor formats", pytrace=False)

    held = f"held by {writer_name} for {reader_name}".encode().ljust(48, b".")
    writer.local_write(4096, held)
    pulled = reader.read(peer, 4096, len(held))
    assert pulled.ok and pulled.data == held, (
        f"{where}: the reader's read of the writer's buffer returned ok={pulled.ok} "
        f"data={pulled.data!r} error={pulled.error!r}, expected {held!r}; MR-8 requires a "
        f"mixed pair transfer both ways")
