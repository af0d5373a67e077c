"""OpLog batch records, durable prefix and applier, without etcd."""

from __future__ import annotations

import json

import pytest

from reference_engine.master.applier import OpLogApplier, SequenceGap
from reference_engine.master.oplog import (
    BatchRecord,
    DurablePrefix,
    OpLogCodecError,
    OpLogEntry,
    OpLogKeys,
    OpType,
    encode_payload,
    master_view_key,
)
from reference_engine.master.replicated import CORRUPT, ReplicatedState
from reference_engine.master.xxh32 import xxh32, xxh32_python


def test_xxh32_known_vectors():
    assert xxh32_python(b"") == 0x02CC5D05
    assert xxh32_python(b"abc") == 0x32D153FF
    assert xxh32_python(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    assert xxh32(b"abc") == 0x32D153FF


def entries(first: int, n: int) -> tuple[OpLogEntry, ...]:
    return tuple(
        OpLogEntry(first + i, OpType.PUT_END, f"k{first + i}", encode_payload({"size": 1}))
        for i in range(n)
    )


def test_batch_record_round_trip_and_layout():
    rec = BatchRecord(3, 10, entries(10, 3))
    raw = rec.encode()
    arr = json.loads(raw)
    assert arr[:4] == [1, 3, 10, 12]
    assert arr[4][0][:3] == [1, "default", "k10"]
    head = json.dumps(arr[:5], separators=(",", ":")).encode()
    assert arr[5] == xxh32(head)
    back = BatchRecord.decode(raw)
    assert back == rec and back.last_seq == 12


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda a: a.__setitem__(5, a[5] ^ 1), "checksum"),
        (lambda a: a.__setitem__(0, 2), "schema_version"),
        (lambda a: a.__setitem__(3, 99), "last_seq - first_seq"),
        (lambda a: a.__setitem__(1, 0), "batch_id"),
        (lambda a: a[4][0].__setitem__(0, 42), "op_type"),
        (lambda a: a[4][0].__setitem__(3, "!!"), "payload"),
    ],
)
def test_batch_record_rejects_malformed(mutate, field):
    arr = json.loads(BatchRecord(1, 1, entries(1, 2)).encode())
    mutate(arr)
    if field != "checksum":
        arr[5] = xxh32(json.dumps(arr[:5], separators=(",", ":")).encode())
    with pytest.raises(OpLogCodecError, match=field):
        BatchRecord.decode(json.dumps(arr, separators=(",", ":")).encode(), where="batch 1")


def test_batch_record_rejects_garbage():
    with pytest.raises(OpLogCodecError, match="not JSON"):
        BatchRecord.decode(b"\xff\x00")


def test_durable_prefix():
    p = DurablePrefix(4, 17)
    assert json.loads(p.encode()) == {"schema_version": 1, "batch_id": 4, "last_seq": 17}
    assert DurablePrefix.decode(p.encode()) == p
    with pytest.raises(OpLogCodecError, match="both zero"):
        DurablePrefix.decode(b'{"schema_version":1,"batch_id":0,"last_seq":3}')


def test_keys():
    keys = OpLogKeys("clu/")
    assert keys.batch(7) == "/oplog/clu/batches/00000000000000000007"
    assert keys.durable_prefix == "/oplog/clu/durable_prefix"
    assert keys.producer_view == "/oplog/clu/producer_view"
    assert master_view_key("clu/") == "mooncake-store/clu/master_view"
    with pytest.raises(ValueError, match="cluster id"):
        OpLogKeys("bad cluster")


def test_applier_in_order_skip_old_reject_gap():
    state = ReplicatedState()
    ap = OpLogApplier(state)
    mount = OpLogEntry(1, OpType.SEGMENT_MOUNT, "a:1", encode_payload(
        {"segment_name": "s", "transport_endpoint": "a:1", "base": 0, "capacity": 10}))
    assert ap.apply(mount)
    assert ap.apply(OpLogEntry(2, OpType.PUT_END, "k", encode_payload({"size": 1})))
    assert not ap.apply(OpLogEntry(2, OpType.PUT_END, "k", b"{}"))
    with pytest.raises(SequenceGap, match="expected 3, got 5"):
        ap.apply(OpLogEntry(5, OpType.REMOVE, "k"))
    assert ap.apply(OpLogEntry(3, OpType.PUT_END, "bad", b"not json"))
    assert state.objects["bad"] is CORRUPT and ap.stats.corrupt_payloads == 1
    assert ap.apply(OpLogEntry(4, OpType.REMOVE, "k"))
    assert ap.apply(OpLogEntry(5, OpType.SEGMENT_UNMOUNT, "a:1"))
    assert "k" not in state.objects and state.segments == {}
    assert ap.applied_seq == 5
