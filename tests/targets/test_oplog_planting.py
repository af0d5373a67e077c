"""The OpLog batch codec the mooncake target plants with, against a record a running 0.3.13.post1
mooncake_master wrote to etcd (measured here: ``/oplog/<cluster>/batches/...06``, the PUT_END of
a 64-byte object ``k3`` at buffer 0x7f68120000c0)."""

from __future__ import annotations

import base64
import json
import os

import pytest

from pytest_mooncake.targets.base import at_segment_end, planted_kind
from pytest_mooncake.targets.mooncake.master_cluster.oplog_planting import (
    PUT_END,
    BatchRecord,
    OpLogEntry,
    OpLogInEtcd,
    UndecodableBatch,
    UndecodablePayload,
    beside_valid,
    compact_json,
    decode_batch,
    decode_object_payload,
    every_replica_overlapping,
    memory_buffer,
    moved_to_unmounted_segment,
    replica_moved,
    shifted_descriptor,
    zero_sized,
)

WRITTEN_BY_0_3_13 = (
    b'[1,6,6,6,[[1,"default","k3","wzhHwAWUAP39BASJif8EhP0Ehv39BASADIAM///9/QQEgAyADP///YAMBP/'
    b'9/QQEiYn/BIAM//2ADAQEBAH//wH//wBnHhm+6b9HWavo0wyQcghzQAAAAAAAAAABBAAAAAAAAAAAQAAAAAAAAADAA'
    b'AASaH8AAAN0Y3APMTI3LjAuMC4xOjI0NjE5AwAAAAEAAQABAA=="]],1207273801]')
K3_ADDRESS = 140084955316416


def test_a_record_the_build_wrote_decodes_and_reencodes_byte_for_byte():
    record = decode_batch(WRITTEN_BY_0_3_13)
    assert (record.batch_id, record.first_seq, record.last_seq) == (6, 6, 6)
    (entry,) = record.entries
    assert (entry.op_type, entry.tenant, entry.key) == (PUT_END, "default", "k3")
    assert record.checksum() == 1207273801
    assert record.encode() == WRITTEN_BY_0_3_13


@pytest.mark.parametrize("damage, said", [
    (lambda raw: raw.replace(b"1207273801", b"1207273802"), "is not XXH32 of its head"),
    (lambda raw: raw.replace(b'"k3"', b'"k4"'), "is not XXH32 of its head"),
    (lambda raw: raw.replace(b"[1,6,6,6", b"[2,6,6,6"), "schema 2"),
    (lambda raw: raw.replace(b"[1,6,6,6", b"[1,6,6,7"), "sequences 6..7 for 1 entries"),
    (lambda raw: raw.replace(b"[1,6,6,6,", b"[1, 6,6,6,"), "re-encoded it differs"),
    (lambda raw: raw[:-1], "not a six-element batch array"),
])
def test_a_record_this_codec_would_not_write_is_named_undecodable(damage, said):
    with pytest.raises(UndecodableBatch, match=said):
        decode_batch(damage(WRITTEN_BY_0_3_13))


def test_a_planted_batch_follows_the_prefix_and_carries_the_builds_checksum():
    entry = OpLogEntry(PUT_END, "default", "planted", b"\x00\x01payload")
    record = BatchRecord(7, 7, (entry,))
    raw = record.encode()
    assert json.loads(raw)[:4] == [1, 7, 7, 7]
    assert decode_batch(raw) == record
    assert compact_json({"schema_version": 1, "last_seq": 7, "batch_id": 7}) == \
        b'{"batch_id":7,"last_seq":7,"schema_version":1}'  # as the build writes its prefix


def test_the_planted_descriptor_overlaps_the_victims_by_half_its_size():
    payload = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    moved, what = shifted_descriptor(payload, K3_ADDRESS, 64)
    assert len(moved) == len(payload)
    changed = [i for i, (a, b) in enumerate(zip(payload, moved, strict=True)) if a != b]
    at = payload.index(K3_ADDRESS.to_bytes(8, "little"))
    assert changed and all(at <= i < at + 8 for i in changed)
    assert int.from_bytes(moved[at:at + 8], "little") == K3_ADDRESS + 32
    assert what == f"[{K3_ADDRESS + 32:#x}, +64) over [{K3_ADDRESS:#x}, +64)"
    same, what = shifted_descriptor(payload, K3_ADDRESS + 1, 64)
    assert same == payload and what.startswith("the same range")


def test_etcd_without_an_oplog_or_with_a_foreign_encoding_is_unplantable(mc_etcd):
    """The probe that makes planting n/a: what the etcd keys of a cluster hold, said."""
    oplog = OpLogInEtcd(list(mc_etcd.endpoints), f"unplanted-{os.getpid()}")
    try:
        assert "keep no batch OpLog in etcd" in oplog.unplantable()
        assert oplog.append([OpLogEntry(PUT_END, "default", "first", b"x")]) == 1
        assert oplog.unplantable() is None
        assert oplog.append([OpLogEntry(PUT_END, "default", "second", b"y")]) == 2
        assert [b.entries[0].key for b in oplog.batches()] == ["first", "second"]
        oplog._etcd.put(oplog.batch_key(3), b'{"entries": []}')
        assert "batches/00000000000000000003 is not the encoding this planter writes" in \
            oplog.unplantable()
    finally:
        oplog._etcd.delete_prefix(oplog.root)
        oplog.close()


def test_the_planted_segment_is_one_nobody_mounted_and_keeps_the_length():
    payload = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    moved, what = moved_to_unmounted_segment(
        payload, "127.0.0.1:24619", {"127.0.0.1:24619", "127.0.0.1:24620"})
    assert len(moved) == len(payload) and b"127.0.0.1:24619" not in moved
    assert b"\x0f127.0.0.1:24621" in moved  # struct_pack's length byte still says 15
    assert what == "on 127.0.0.1:24621, a segment nobody mounted"
    with pytest.raises(ValueError, match="occurs 0 times"):
        moved_to_unmounted_segment(payload, "127.0.0.1:9", set())


def test_an_unknown_kind_of_planted_descriptor_is_refused_naming_the_known_ones():
    assert planted_kind("unknown_segment") == "unknown_segment"
    with pytest.raises(ValueError, match=r"unknown kind 'torn' \(known: overlap, unknown_segment, malformed, "
                                         r"overlap_beside_valid, unknown_segment_beside_valid, "
                                         r"overlap_on_every_replica, straddles_segment_end, "
                                         r"past_segment_end, ends_at_segment_end, zero_size\)"):
        planted_kind("torn")


ONE_AND_TWO_REPLICAS = {
    # PUT_END payloads two store clients' puts made a running master write (measured here on
    # a 2-master ha-oplog cluster): k1 put with one replica, then k2 with replica_num=2 (one
    # on each client's segment), the same writer; base64 as in the batch record.
    "0.3.13.post1": (
        "wzhHwAWUAP39BASJif8EhP0Ehv39BASADIAM///9/QQEgAyADP///YAMBP/9/QQEiYn/BIAM//2ADAQEBAH//wH/"
        "/wCvvgLCxG5KsoUT7vF+PAK/QAAAAAAAAAABAQAAAAAAAAAAQAAAAAAAAAAAAAC2YX8AAAN0Y3APMTI3LjAuMC4x"
        "OjIyMzY4AwAAAAEAAQABAA==",
        "wzhHwAXFAP39BASJif8EhP0Ehv39BASADIAM///9/QQEgAyADP///YAMBP/9/QQEiYn/BIAM//2ADAQEBAH//wH/"
        "/wCvvgLCxG5KsoUT7vF+PAK/QAAAAAAAAAACAgAAAAAAAAAAQAAAAAAAAABAAAC2YX8AAAN0Y3APMTI3LjAuMC4x"
        "OjIyMzY4AwAAAAMAAAAAAAAAAEAAAAAAAAAAAAAASrF/AAADdGNwDzEyNy4wLjAuMToyNzczMgMAAAABAAEAAQA="),
    "0.3.14": (
        "wzhHwAWaAP39BASJif8EhP0Ehv39BASADIAM///9/QQEgAyADP///YAMBP/9/QQEiYn/BIAM//2ADAQEBAH//wH/"
        "/wDUOY7z7hdDgYsBKz2RXt8qQAAAAAAAAAABAQAAAAAAAAAAQAAAAAAAAAAAAACr+n8AAAN0Y3APMTI3LjAuMC4x"
        "OjIzMjY2AwAAAAABAAEAAQABAAABAA==",
        "wzhHwAXMAP39BASJif8EhP0Ehv39BASADIAM///9/QQEgAyADP///YAMBP/9/QQEiYn/BIAM//2ADAQEBAH//wH/"
        "/wDUOY7z7hdDgYsBKz2RXt8qQAAAAAAAAAACAgAAAAAAAAAAQAAAAAAAAABAAACr+n8AAAN0Y3APMTI3LjAuMC4x"
        "OjIzMjY2AwAAAAMAAAAAAAAAAEAAAAAAAAAAAAAApY9/AAADdGNwDzEyNy4wLjAuMToyNTYxOAMAAAAAAAEAAQAB"
        "AAEAAAEA"),
}


@pytest.mark.parametrize("release", sorted(ONE_AND_TWO_REPLICAS))
def test_a_one_replica_record_given_the_builds_two_replicas_encodes_as_the_build_did(release):
    """The encoder adds a replica where the build does: the count, the replica, its compatible
    fields in the tail (one byte each on 0.3.14, none on 0.3.13.post1) and the total length."""
    one, two = (base64.b64decode(p) for p in ONE_AND_TWO_REPLICAS[release])
    single, double = decode_object_payload(one), decode_object_payload(two)
    assert [memory_buffer(r)["f3"] for r in single.replicas] == [
        "127.0.0.1:22368" if release < "0.3.14" else "127.0.0.1:23266"]
    buffers = [memory_buffer(r) for r in double.replicas]
    assert len(buffers) == 2 and buffers[0]["f3"] != buffers[1]["f3"]
    assert [(b["f0"], b["f2"]) for b in buffers] == [(64, "tcp")] * 2
    assert (len(single.replica_tail), len(double.replica_tail)) == (
        (0, 0) if release < "0.3.14" else (1, 1))
    assert single.with_replicas(double.replicas).encode() == two
    assert double.with_replicas(single.replicas).encode() == one


def test_the_object_beside_a_valid_replica_holds_the_spare_then_the_overlapping_one():
    victim = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    spare = base64.b64decode(ONE_AND_TWO_REPLICAS["0.3.13.post1"][0])
    planted, what = beside_valid(victim, spare, K3_ADDRESS, 64)
    freed, moved = decode_object_payload(planted).replicas
    assert freed == decode_object_payload(spare).replicas[0]
    (own,) = decode_object_payload(victim).replicas
    assert memory_buffer(moved) == {**memory_buffer(own), "f1": K3_ADDRESS + 32}
    assert (moved["f0"], moved["f2"]) == (own["f0"], own["f2"])
    assert int.from_bytes(planted[5:7], "little") == len(planted) == len(victim) + 49
    assert what == (f"[{memory_buffer(freed)['f1']:#x}, +64) on 127.0.0.1:22368, freed, beside "
                    f"[{K3_ADDRESS + 32:#x}, +64) over [{K3_ADDRESS:#x}, +64)")
    with pytest.raises(UndecodablePayload, match="no replica of the victim's metadata is at"):
        beside_valid(victim, spare, K3_ADDRESS + 8, 64)


def test_the_object_with_every_replica_overlapping_holds_both_over_the_victims_memory():
    victim = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    spare = base64.b64decode(ONE_AND_TWO_REPLICAS["0.3.13.post1"][0])
    planted, what = every_replica_overlapping(victim, spare, K3_ADDRESS, 64)
    on_victim, moved = decode_object_payload(planted).replicas
    (freed,) = decode_object_payload(spare).replicas
    (own,) = decode_object_payload(victim).replicas
    assert memory_buffer(on_victim) == {**memory_buffer(freed), "f1": K3_ADDRESS}
    assert (on_victim["f0"], on_victim["f2"]) == (freed["f0"], freed["f2"])
    assert memory_buffer(moved) == {**memory_buffer(own), "f1": K3_ADDRESS + 32}
    assert int.from_bytes(planted[5:7], "little") == len(planted) == len(victim) + 49
    assert what == (f"[{K3_ADDRESS:#x}, +64) and [{K3_ADDRESS + 32:#x}, +64), both over "
                    f"[{K3_ADDRESS:#x}, +64)")


def test_the_object_beside_a_valid_replica_can_hold_the_victims_replica_on_another_segment():
    victim = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    spare = base64.b64decode(ONE_AND_TWO_REPLICAS["0.3.13.post1"][0])
    planted, what = beside_valid(victim, spare, K3_ADDRESS, 64, "127.0.0.1:22999")
    freed, elsewhere = decode_object_payload(planted).replicas
    assert freed == decode_object_payload(spare).replicas[0]
    (own,) = decode_object_payload(victim).replicas
    assert memory_buffer(elsewhere) == {**memory_buffer(own), "f3": "127.0.0.1:22999"}
    assert what.endswith(f"beside [{K3_ADDRESS:#x}, +64) on 127.0.0.1:22999")


@pytest.mark.parametrize("damage, said", [
    (lambda raw: raw[:-3], "no total length equal to its 145 bytes"),
    (lambda raw: raw[:4] + b"\x15" + raw[5:], "not struct_pack object metadata"),  # 4-byte lengths
    (lambda raw: b"\xc2" + raw[1:], "sends no type literal"),
    (lambda raw: raw[:9] + b"\x03\x03" + raw[11:], "is not that of the struct its literal"),
    (lambda raw: raw.replace(b"\x04\x00\x00\x00\x00\x00\x00\x00\x00@",
                             b"\x04\x00\x00\x00\x00\x00\x00\x00\x02@"), "string of 64 bytes"),
])
def test_a_payload_this_codec_would_not_write_is_named_undecodable(damage, said):
    payload = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    with pytest.raises(UndecodablePayload, match=said):
        decode_object_payload(damage(payload))


def test_a_replica_other_than_in_memory_is_named():
    with pytest.raises(UndecodablePayload, match="is no memory replica"):
        memory_buffer({"f0": 4, "f1": (2, {"f0": "/disk/file", "f1": 64}), "f2": 3})


SEGMENT_END = K3_ADDRESS - 0xC0 + (16 << 20)
"""Where k3's segment would end: a 16 MiB segment whose base k3's buffer is 0xc0 into."""


@pytest.mark.parametrize("kind, start", [("ends_at_segment_end", SEGMENT_END - 64),
                                         ("straddles_segment_end", SEGMENT_END - 32),
                                         ("past_segment_end", SEGMENT_END)])
def test_the_victims_replica_moved_by_its_segments_end_keeps_everything_else(kind, start):
    """The segment-end kinds move only the buffer address of the build's own record: the
    descriptor then ends at the segment's end, runs 32 bytes past it, or starts at it."""
    assert at_segment_end(kind, SEGMENT_END, 64) == start
    victim = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    planted, what = replica_moved(victim, K3_ADDRESS, start)
    (moved,) = decode_object_payload(planted).replicas
    (own,) = decode_object_payload(victim).replicas
    assert memory_buffer(moved) == {**memory_buffer(own), "f1": start}
    assert (moved["f0"], moved["f2"]) == (own["f0"], own["f2"])
    assert len(planted) == len(victim)
    assert planted.replace(start.to_bytes(8, "little"), K3_ADDRESS.to_bytes(8, "little")) == victim
    assert what == f"[{start:#x}, +64) on 127.0.0.1:24619, moved from [{K3_ADDRESS:#x}, +64)"
    with pytest.raises(UndecodablePayload, match="no replica of the victim's metadata is at"):
        replica_moved(victim, K3_ADDRESS + 8, start)



def test_the_zero_sized_object_says_size_0_and_a_replica_of_0_bytes_at_the_victims_address():
    victim = decode_batch(WRITTEN_BY_0_3_13).entries[0].payload
    planted, what = zero_sized(victim, K3_ADDRESS)
    zeroed, original = decode_object_payload(planted), decode_object_payload(victim)
    assert zeroed.value["f1"] == 0 and original.value["f1"] == 64
    assert zeroed.value["f0"] == original.value["f0"]
    (own,) = original.replicas
    (replica,) = zeroed.replicas
    assert memory_buffer(replica) == {**memory_buffer(own), "f0": 0}
    assert (replica["f0"], replica["f2"]) == (own["f0"], own["f2"])
    assert len(planted) == len(victim) and zeroed.tail == original.tail
    assert what == f"size 0, [{K3_ADDRESS:#x}, +0) on 127.0.0.1:24619"
    with pytest.raises(UndecodablePayload, match="no replica of the victim's metadata is at"):
        zero_sized(victim, K3_ADDRESS + 8)
