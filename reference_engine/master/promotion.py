"""Promotion context, its validation (as a dry run or at restore), and restore into an index.

Validation checks what Mooncake's RestoreFromStandbySnapshot checks: segments well formed and
unambiguous; every live memory descriptor on a known segment, inside it, of the object's size;
per-segment capacity; no two live descriptors overlapping. Where Mooncake rejects the whole
context on the first problem, the report here lists every bad entry, so the caller can choose:
all-or-nothing (legacy) or partial (drop the bad entries, keep the rest).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reference_engine.master.index import ObjectIndex
from reference_engine.master.model import (
    MemoryDescriptor,
    ObjectMeta,
    Replica,
    ReplicaStatus,
    SegmentInfo,
)
from reference_engine.master.replicated import ReplicatedState
from reference_engine.master.segments import SegmentRegistry

_DEAD = ("REMOVED", "FAILED")


@dataclass(frozen=True)
class PromotionContext:
    applied_seq: int
    objects: Mapping[str, dict[str, Any]]
    segments: Mapping[str, SegmentInfo]

    @classmethod
    def of(cls, state: ReplicatedState, applied_seq: int) -> PromotionContext:
        return cls(applied_seq, dict(state.objects), dict(state.segments))


@dataclass(frozen=True)
class Dropped:
    key: str
    reason: str
    replica_id: int | None = None
    kind: str = "object"

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "key": self.key, "reason": self.reason}
        if self.replica_id is not None:
            out["replica_id"] = self.replica_id
        return out


@dataclass
class ValidationReport:
    ok: bool
    dropped: list[Dropped] = field(default_factory=list)
    keys_total: int = 0
    keys_restorable: int = 0
    seconds: float = 0.0
    valid_keys: list[str] = field(default_factory=list, repr=False)
    dead_replicas: dict[str, set[int]] = field(default_factory=dict, repr=False)
    valid_segments: dict[str, SegmentInfo] = field(default_factory=dict, repr=False)

    @property
    def dropped_entries(self) -> int:
        return len(self.dropped)

    def to_json(self, limit: int = 50) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "dropped_entries": self.dropped_entries,
            "dropped": [d.to_json() for d in self.dropped[:limit]],
            "keys_total": self.keys_total,
            "keys_restorable": self.keys_restorable,
            "seconds": round(self.seconds, 6),
        }


class RestoreRejected(Exception):
    """All-or-nothing restore met an invalid entry: nothing was restored."""

    def __init__(self, report: ValidationReport):
        self.report = report
        first = report.dropped[0] if report.dropped else None
        super().__init__(
            f"restore rejected: {first.reason} ({first.kind} {first.key!r})" if first
            else "restore rejected"
        )


def validate(ctx: PromotionContext) -> ValidationReport:
    """Check the whole context; never mutates it."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _validate(ctx)
    finally:
        if gc_was_enabled:
            gc.enable()


def _validate(ctx: PromotionContext) -> ValidationReport:
    t0 = time.perf_counter()
    dropped: list[Dropped] = []
    segments = _valid_segments(ctx.segments, dropped)
    bounds = {ep: (info.base, info.base + info.capacity) for ep, info in segments.items()}
    used: dict[str, int] = dict.fromkeys(segments, 0)
    ranges: dict[str, list[tuple[int, int, int, str, int]]] = {ep: [] for ep in segments}
    replica_counts: dict[str, int] = {}
    """Live replicas per key, recorded only where it is not exactly 1."""
    lost: dict[str, int] = {}
    dead: dict[str, set[int]] = {}
    bad_keys: set[str] = set()

    get_bound = bounds.get
    for order, (key, obj) in enumerate(ctx.objects.items()):
        try:
            size = obj["size"]
            reps = obj["replicas"]
            if type(size) is not int or size <= 0 or type(reps) is not list or "corrupt" in obj:
                raise TypeError
        except (TypeError, KeyError):
            dropped.append(Dropped(key, _object_problem(obj) or "malformed object metadata"))
            bad_keys.add(key)
            continue
        count = 0
        for rep in reps:
            try:
                status = rep["status"]
                descs = rep["descriptors"]
                rid = rep["id"]
                if status in _DEAD:
                    continue
                for endpoint, address, dsize in descs:
                    lo, hi = get_bound(endpoint)
                    if (type(address) is not int or type(dsize) is not int or dsize != size
                            or address < lo or address + dsize > hi):
                        raise ValueError
            except (TypeError, KeyError, ValueError):
                problem = _replica_problem(rep, size, bounds) or "malformed replica"
                rid = rep.get("id") if isinstance(rep, dict) else None
                dropped.append(Dropped(key, problem, rid, "replica"))
                dead.setdefault(key, set()).add(rid)
                continue
            for endpoint, address, dsize in descs:
                used[endpoint] += dsize
                ranges[endpoint].append((address, address + dsize, order, key, rid))
            count += 1
        if count != 1:
            replica_counts[key] = count

    for endpoint, items in ranges.items():
        if used[endpoint] > segments[endpoint].capacity:
            dropped.append(Dropped(endpoint, "replicas exceed segment capacity", kind="segment"))
        items.sort()
        kept: tuple[int, int, int, str, int] | None = None
        for item in items:
            if kept is not None and item[0] < kept[1]:
                loser, kept = (item, kept) if item[2] > kept[2] else (kept, item)
                dropped.append(Dropped(loser[3], f"overlapping memory descriptors on {endpoint}",
                                       loser[4], "replica"))
                dead.setdefault(loser[3], set()).add(loser[4])
                lost[loser[3]] = lost.get(loser[3], 0) + 1
            else:
                kept = item

    emptied = {k for k, c in replica_counts.items() if c <= 0}
    emptied.update(k for k, n in lost.items() if replica_counts.get(k, 1) - n <= 0)
    for key in emptied:
        dropped.append(Dropped(key, "no valid replica left" if key in dead else "no live replica"))
    excluded = bad_keys | emptied
    if excluded:
        valid_keys = [k for k in ctx.objects if k not in excluded]
    else:
        valid_keys = list(ctx.objects)
    return ValidationReport(
        ok=not dropped,
        dropped=dropped,
        keys_total=len(ctx.objects),
        keys_restorable=len(valid_keys),
        seconds=time.perf_counter() - t0,
        valid_keys=valid_keys,
        dead_replicas=dead,
        valid_segments=segments,
    )


def restore(
    ctx: PromotionContext, partial: bool, report: ValidationReport | None = None, **index_options: Any
) -> tuple[ObjectIndex, ValidationReport]:
    """Build a serving index from ``ctx``; all-or-nothing raises RestoreRejected on any problem."""
    report = report or validate(ctx)
    if not report.ok and not partial:
        raise RestoreRejected(report)
    registry = SegmentRegistry()
    for info in report.valid_segments.values():
        registry.mount(info)
    index = ObjectIndex(registry, **index_options)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        index.install(_restored_objects(ctx, report, registry))
    finally:
        if was_enabled:
            gc.enable()
    return index, report


def _restored_objects(ctx: PromotionContext, report: ValidationReport,
                      registry: SegmentRegistry) -> list[ObjectMeta]:
    """Validated wire objects as index records, their ranges reserved in the allocators."""
    statuses = {s.value: s for s in ReplicaStatus}
    allocators = {s.endpoint: s.allocator for s in registry.all()}
    dead_replicas = report.dead_replicas
    metas = []
    for key in report.valid_keys:
        raw = ctx.objects[key]
        dead = dead_replicas.get(key, ())
        replicas = []
        for rep in raw["replicas"]:
            rid, status = rep["id"], rep["status"]
            if status in _DEAD or rid in dead:
                continue
            descs = tuple(MemoryDescriptor(ep, address, size) for ep, address, size in rep["descriptors"])
            for d in descs:
                allocators[d.endpoint].reserve(d.address, d.size)
            replicas.append(Replica(rid, statuses[status], descs))
        metas.append(ObjectMeta(key, raw["size"], raw.get("client_id", ""), replicas, complete=True))
    return metas


def _valid_segments(segments: Mapping[str, SegmentInfo], dropped: list[Dropped]) -> dict[str, SegmentInfo]:
    out: dict[str, SegmentInfo] = {}
    names: dict[str, str] = {}
    for endpoint, info in segments.items():
        if not info.name or not info.endpoint or info.capacity <= 0:
            dropped.append(Dropped(endpoint, "segment without name, endpoint or capacity", kind="segment"))
            continue
        if info.name in names and names[info.name] != endpoint:
            dropped.append(Dropped(endpoint, f"segment name {info.name!r} is ambiguous", kind="segment"))
            continue
        names[info.name] = endpoint
        out[endpoint] = info
    return out


def _object_problem(obj: Any) -> str | None:
    if type(obj) is not dict or "corrupt" in obj:
        return "undecodable object metadata"
    size = obj.get("size")
    if type(size) is not int or size <= 0:
        return "object size is not a positive integer"
    if type(obj.get("replicas")) is not list:
        return "replicas is not a list"
    return None


def _replica_problem(rep: Any, size: int, bounds: Mapping[str, tuple[int, int]]) -> str | None:
    if type(rep) is not dict:
        return "malformed replica"
    descs = rep.get("descriptors")
    if type(descs) is not list:
        return "malformed replica"
    if type(rep.get("id")) is not int:
        return "replica id is not an integer"
    if rep.get("status") in _DEAD:
        return None
    for raw in descs:
        if type(raw) is not list or len(raw) != 3:
            return "malformed memory descriptor"
        endpoint, address, dsize = raw
        bound = bounds.get(endpoint) if type(endpoint) is str else None
        if bound is None:
            return f"memory descriptor on unknown segment {endpoint!r}"
        if type(address) is not int or type(dsize) is not int or address < 0:
            return "memory descriptor address/size not integers"
        if dsize != size:
            return "memory descriptor size differs from object size"
        if address < bound[0] or address + dsize > bound[1]:
            return f"memory descriptor outside segment {endpoint!r}"
    return None
