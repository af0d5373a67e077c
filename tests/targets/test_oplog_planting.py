"""The OpLog batch codec the mooncake target plants with, against a record a running 0.3.13.post1
mooncake_master wrote to etcd (measured here: ``/oplog/<cluster>/batches/...06``, the PUT_END of
a 64-byte object ``k3`` at buffer 0x7f68120000c0)."""

from __future__ import annotations

import json
import os

import pytest

from pytest_mooncake.targets.base import planted_kind
from pytest_mooncake.targets.mooncake.master_cluster.oplog_planting import (
    PUT_END,
    BatchRecord,
    OpLogEntry,
    OpLogInEtcd,
    UndecodableBatch,
    compact_json,
    decode_batch,
    moved_to_unmounted_segment,
    shifted_descriptor,
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
                                         r"overlap_beside_valid\)"):
        planted_kind("torn")
