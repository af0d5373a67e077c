"""Dry-run validation of a promotion context and partial vs all-or-nothing restore."""

from __future__ import annotations

import pytest

from reference_engine.master.model import SegmentInfo
from reference_engine.master.promotion import PromotionContext, RestoreRejected, restore, validate

SEG = SegmentInfo("s0", "a:1", base=1000, capacity=10_000)
SEG2 = SegmentInfo("s1", "b:1", base=50_000, capacity=10_000)


def obj(*descs, size=100, status="COMPLETE"):
    return {"client_id": "c", "size": size, "replicas": [
        {"id": i + 1, "status": status, "descriptors": [list(d)]} for i, d in enumerate(descs)
    ]}


def ctx(objects, segments=(SEG, SEG2)):
    return PromotionContext(len(objects), objects, {s.endpoint: s for s in segments})


def good(n):
    return {f"k{i}": obj(("a:1", 1000 + 100 * i, 100)) for i in range(n)}


def test_clean_context_validates_and_restores_every_key():
    c = ctx(good(50))
    report = validate(c)
    assert report.ok and report.keys_restorable == 50 and report.dropped_entries == 0
    index, _ = restore(c, partial=False)
    assert sorted(index.keys()) == sorted(c.objects)
    index.put_start("x", "new", 100, 1, 0.0)
    new = index.objects["new"].replicas[0].descriptors[0]
    assert not (1000 <= new.address < 6000 and new.endpoint == "a:1")


def test_touching_ranges_are_fine():
    assert validate(ctx({"a": obj(("a:1", 1000, 100)), "b": obj(("a:1", 1100, 100))})).ok


def with_bad_descriptor():
    objects = good(20)
    objects["planted"] = obj(("a:1", 1050, 100))
    return ctx(objects)


def test_one_overlapping_descriptor_fails_the_dry_run_naming_it():
    report = validate(with_bad_descriptor())
    assert not report.ok
    assert {(d.key, d.kind) for d in report.dropped} >= {("planted", "replica"), ("planted", "object")}
    assert "overlapping memory descriptors" in report.dropped[0].reason
    assert report.keys_restorable == 20


def test_all_or_nothing_restore_rejects_everything():
    with pytest.raises(RestoreRejected, match="overlapping"):
        restore(with_bad_descriptor(), partial=False)


def test_partial_restore_drops_only_the_bad_entry():
    index, report = restore(with_bad_descriptor(), partial=True)
    assert sorted(index.keys()) == sorted(f"k{i}" for i in range(20))
    assert report.dropped_entries >= 1


def test_object_with_one_bad_replica_keeps_the_good_one():
    objects = good(2)
    objects["two"] = obj(("b:1", 50_000, 100), ("a:1", 1000, 100))
    index, report = restore(ctx(objects), partial=True)
    assert index.exists("two") and len(index.objects["two"].replicas) == 1
    assert [(d.key, d.kind, d.replica_id) for d in report.dropped] == [("two", "replica", 2)]


def test_object_with_one_replica_on_an_unknown_segment_keeps_the_good_one():
    objects = good(2)
    objects["two"] = obj(("b:1", 50_000, 100), ("zz:1", 1000, 100))
    index, report = restore(ctx(objects), partial=True)
    assert index.exists("two") and len(index.objects["two"].replicas) == 1
    assert [(d.key, d.kind, d.replica_id) for d in report.dropped] == [("two", "replica", 2)]
    assert "unknown segment" in report.dropped[0].reason and not report.ok


@pytest.mark.parametrize(
    "bad, reason",
    [
        (obj(("zz:1", 1000, 100)), "unknown segment"),
        (obj(("a:1", 1000, 50)), "size differs"),
        (obj(("a:1", 10_950, 100)), "outside segment"),
        ({"corrupt": True}, "undecodable"),
        ({"size": -1, "replicas": []}, "size"),
        (obj(("a:1", 1000, 0), size=0), "size"),
        (obj(("a:1", 1000, 100), status="REMOVED"), "no live replica"),
    ],
)
def test_each_kind_of_bad_entry_is_reported(bad, reason):
    objects = {"ok": obj(("b:1", 50_000, 100)), "bad": bad}
    report = validate(ctx(objects))
    assert not report.ok and report.keys_restorable == 1
    assert any(d.key == "bad" and reason in d.reason for d in report.dropped)


def test_bad_segments_are_dropped_and_their_objects_with_them():
    segs = (SEG, SegmentInfo("", "c:1", 0, 10), SegmentInfo("s0", "d:1", 0, 100))
    report = validate(ctx({"k": obj(("a:1", 1000, 100))}, segs))
    assert {d.key for d in report.dropped if d.kind == "segment"} == {"c:1", "d:1"}
    assert report.keys_restorable == 1


@pytest.mark.parametrize("capacity", [150, 199])
def test_capacity_overcommit_is_reported(capacity):
    """Two 100-byte replicas at one address: 200 bytes on a segment of ``capacity`` (199: over
    by one byte), reported as an overcommit besides the overlap."""
    small = SegmentInfo("s", "a:1", 1000, capacity)
    objects = {"a": obj(("a:1", 1000, 100)), "b": obj(("a:1", 1000, 100))}
    report = validate(ctx(objects, (small,)))
    assert any("capacity" in d.reason for d in report.dropped)


def test_validation_does_not_mutate_the_context():
    c = with_bad_descriptor()
    before = repr(c.objects)
    validate(c)
    restore(c, partial=True)
    assert repr(c.objects) == before
