"""Snapshot files: atomic write, checksum, last included sequence, fallback, retention."""

from __future__ import annotations

import json

import pytest

from reference_engine.master.model import SegmentInfo
from reference_engine.master.replicated import ReplicatedState
from reference_engine.master.snapshots import Snapshot, SnapshotError, SnapshotStore


def state(n):
    s = ReplicatedState()
    s.segments["a:1"] = SegmentInfo("s", "a:1", 0, 1 << 20)
    for i in range(n):
        s.objects[f"k{i}"] = {"client_id": "c", "size": 10, "replicas": [
            {"id": i, "status": "COMPLETE", "descriptors": [["a:1", 10 * i, 10]]}]}
    return s


def test_round_trip_keeps_every_object(tmp_path):
    store = SnapshotStore(tmp_path)
    store.write(Snapshot(40, 4, 7, state(40)))
    snap = store.load_latest()
    assert snap.last_included_seq == 40 and snap.last_included_batch_id == 4
    assert snap.producer_view_version == 7
    assert snap.state.objects == state(40).objects
    assert snap.state.segments == state(40).segments
    assert not list(tmp_path.glob(".*tmp"))


def test_corrupt_newest_falls_back_to_older_and_says_why(tmp_path):
    store = SnapshotStore(tmp_path, retain=3)
    store.write(Snapshot(10, 1, 1, state(10)))
    newest = store.write(Snapshot(20, 2, 1, state(20)))
    doc = json.loads(newest.read_bytes())
    doc["body"]["objects"].pop("k3")
    newest.write_text(json.dumps(doc))
    snap = store.load_latest()
    assert snap.last_included_seq == 10 and len(snap.skipped) == 1
    assert "checksum mismatch" in snap.skipped[0]


def test_truncated_file_is_rejected_naming_it(tmp_path):
    store = SnapshotStore(tmp_path)
    path = store.write(Snapshot(5, 1, 1, state(5)))
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(SnapshotError, match=path.name):
        store.load(path)
    assert store.load_latest() is None


def test_retention(tmp_path):
    store = SnapshotStore(tmp_path, retain=2)
    for seq in (1, 2, 3):
        store.write(Snapshot(seq, seq, 1, state(1)))
    assert [p.name for p in store.paths()] == [
        "snapshot-00000000000000000003.json", "snapshot-00000000000000000002.json"]


def test_inconsistent_header_is_refused(tmp_path):
    with pytest.raises(SnapshotError, match="both zero"):
        SnapshotStore(tmp_path).write(Snapshot(5, 0, 1, state(1)))
