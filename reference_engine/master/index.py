"""The object index as Mooncake's master keeps it: objects, their replicas, leases.

Every mutation returns what the OpLog must record (the full replica set after the change, or a
removal), so the leader service can replicate exactly what it did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.model import MemoryDescriptor, ObjectMeta, Replica, ReplicaStatus
from reference_engine.master.segments import SegmentRegistry, SegmentStatus


@dataclass(frozen=True)
class Change:
    """One replicated effect of a mutation: ``meta`` is the new state, None means removed."""

    key: str
    meta: ObjectMeta | None


class ObjectIndex:
    def __init__(
        self,
        segments: SegmentRegistry,
        lease_ttl: float = 10.0,
        put_start_discard_timeout: float = 30.0,
    ):
        self.segments = segments
        self.lease_ttl = lease_ttl
        self.put_start_discard_timeout = put_start_discard_timeout
        self.objects: dict[str, ObjectMeta] = {}
        self._next_replica_id = 1

    def __len__(self) -> int:
        return sum(1 for m in self.objects.values() if m.complete)

    def keys(self) -> list[str]:
        return [k for k, m in self.objects.items() if m.complete]

    # ------------------------------------------------------------------ writes

    def put_start(
        self, client_id: str, key: str, size: int, replica_num: int, now: float
    ) -> list[Replica]:
        if not key:
            raise MasterError(ErrorCode.INVALID_PARAMS, "key: empty")
        if size <= 0:
            raise MasterError(ErrorCode.INVALID_PARAMS, f"key {key!r}: size must be positive")
        if replica_num <= 0:
            raise MasterError(ErrorCode.INVALID_PARAMS, f"key {key!r}: replica_num must be positive")
        old = self.objects.get(key)
        if old is not None:
            if old.complete or now - old.put_start_time < self.put_start_discard_timeout:
                raise MasterError(ErrorCode.OBJECT_ALREADY_EXISTS, f"key {key!r} exists")
            self._free(old)
            del self.objects[key]
        got = self.segments.allocate(size, replica_num)
        if len(got) < replica_num:
            for endpoint, address in got:
                self.segments.free(endpoint, address, size)
            raise MasterError(
                ErrorCode.NO_AVAILABLE_HANDLE,
                f"key {key!r}: no space for {replica_num} replica(s) of {size} bytes",
            )
        replicas = []
        for endpoint, address in got:
            replicas.append(
                Replica(self._new_replica_id(), ReplicaStatus.PROCESSING,
                        (MemoryDescriptor(endpoint, address, size),))
            )
        self.objects[key] = ObjectMeta(key, size, client_id, replicas, put_start_time=now)
        return replicas

    def put_end(self, client_id: str, key: str) -> Change:
        meta = self._require(key)
        if meta.complete:
            raise MasterError(ErrorCode.OBJECT_ALREADY_EXISTS, f"key {key!r} already completed")
        for r in meta.replicas:
            r.status = ReplicaStatus.COMPLETE
        meta.complete = True
        return Change(key, meta)

    def put_revoke(self, client_id: str, key: str) -> None:
        meta = self._require(key)
        if meta.complete:
            raise MasterError(ErrorCode.INVALID_PARAMS, f"key {key!r}: cannot revoke a completed put")
        self._free(meta)
        del self.objects[key]

    def remove(self, key: str, now: float, force: bool = False) -> Change:
        meta = self.objects.get(key)
        if meta is None or not meta.complete:
            raise MasterError(ErrorCode.OBJECT_NOT_FOUND, f"key {key!r} not found")
        if not force and meta.lease_until > now:
            raise MasterError(ErrorCode.OBJECT_HAS_LEASE, f"key {key!r} has a read lease")
        self._free(meta)
        del self.objects[key]
        return Change(key, None)

    def drop_segment(self, endpoint: str) -> list[Change]:
        """Forget every replica on ``endpoint`` (its segment is going away)."""
        changes = []
        for key, meta in list(self.objects.items()):
            kept = [r for r in meta.replicas if not any(d.endpoint == endpoint for d in r.descriptors)]
            if len(kept) == len(meta.replicas):
                continue
            for r in meta.replicas:
                if r not in kept:
                    self._free_replica(r, skip=endpoint)
            meta.replicas = kept
            if not kept:
                del self.objects[key]
                if meta.complete:
                    changes.append(Change(key, None))
            elif meta.complete:
                changes.append(Change(key, meta))
        return changes

    def migrate_from(self, endpoint: str, limit: int = 64) -> list[Change]:
        """Move up to ``limit`` completed replicas off a draining segment to allocatable ones."""
        changes = []
        for key, meta in self.objects.items():
            if len(changes) >= limit:
                break
            if not meta.complete:
                continue
            for i, r in enumerate(meta.replicas):
                if not any(d.endpoint == endpoint for d in r.descriptors):
                    continue
                others = {d.endpoint for x in meta.replicas for d in x.descriptors}
                got = self.segments.allocate(meta.size, 1, exclude=others)
                if not got:
                    return changes
                new_endpoint, address = got[0]
                self._free_replica(r)
                meta.replicas[i] = Replica(
                    self._new_replica_id(), ReplicaStatus.COMPLETE,
                    (MemoryDescriptor(new_endpoint, address, meta.size),),
                )
                changes.append(Change(key, meta))
        return changes

    def replicas_on(self, endpoint: str) -> int:
        return sum(
            1 for m in self.objects.values() for r in m.replicas
            if any(d.endpoint == endpoint for d in r.descriptors)
        )

    # ------------------------------------------------------------------ reads

    def get_replica_list(self, key: str, now: float) -> ObjectMeta:
        meta = self.objects.get(key)
        if meta is None or not meta.complete:
            raise MasterError(ErrorCode.OBJECT_NOT_FOUND, f"key {key!r} not found")
        readable = [r for r in meta.readable_replicas() if self._replica_readable(r)]
        if not readable:
            raise MasterError(ErrorCode.REPLICA_IS_NOT_READY, f"key {key!r}: no readable replica")
        meta.lease_until = max(meta.lease_until, now + self.lease_ttl)
        return ObjectMeta(meta.key, meta.size, meta.client_id, readable, complete=True,
                          lease_until=meta.lease_until)

    def exists(self, key: str) -> bool:
        meta = self.objects.get(key)
        return meta is not None and meta.complete

    # ------------------------------------------------------------------ restore

    def install(self, objects: Iterable[ObjectMeta]) -> None:
        """Insert restored objects whose ranges were already reserved in the segments."""
        for meta in objects:
            meta.complete = True
            meta.lease_until = 0.0
            self.objects[meta.key] = meta
            for r in meta.replicas:
                self._next_replica_id = max(self._next_replica_id, r.id + 1)

    # ------------------------------------------------------------------ helpers

    def _require(self, key: str) -> ObjectMeta:
        meta = self.objects.get(key)
        if meta is None:
            raise MasterError(ErrorCode.OBJECT_NOT_FOUND, f"key {key!r} not found")
        return meta

    def _new_replica_id(self) -> int:
        rid = self._next_replica_id
        self._next_replica_id += 1
        return rid

    def _replica_readable(self, r: Replica) -> bool:
        for d in r.descriptors:
            seg = self.segments.get(d.endpoint)
            if seg is None or not seg.readable:
                return False
        return True

    def _free(self, meta: ObjectMeta) -> None:
        for r in meta.replicas:
            self._free_replica(r)

    def _free_replica(self, r: Replica, skip: str | None = None) -> None:
        for d in r.descriptors:
            if d.endpoint != skip:
                self.segments.free(d.endpoint, d.address, d.size)


def drained(index: ObjectIndex, endpoint: str) -> bool:
    """True when no replica lives on ``endpoint`` (a DRAINING segment may become DRAINED)."""
    seg = index.segments.get(endpoint)
    return seg is not None and seg.status is SegmentStatus.DRAINING and index.replicas_on(endpoint) == 0
