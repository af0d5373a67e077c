"""The leader's store service: index mutations replicated through the OpLog before they are
acknowledged, client heartbeats with TTL expiry, and the segment drain lifecycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from reference_engine.master.clients import ClientRegistry
from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.index import Change, ObjectIndex, drained
from reference_engine.master.model import SegmentInfo, WireError, u64_field
from reference_engine.master.oplog import OpType, encode_payload
from reference_engine.master.segments import SegmentStatus
from reference_engine.master.writer import OpLogWriter

log = logging.getLogger("reference_engine.master.service")


class MasterService:
    def __init__(
        self,
        index: ObjectIndex,
        writer: OpLogWriter,
        view_version: int,
        client_ttl: float = 10.0,
        write_timeout: float = 5.0,
        expected_clients: Iterable[str] = (),
    ):
        self.index = index
        self.writer = writer
        self.view_version = view_version
        self.clients = ClientRegistry(client_ttl)
        self.write_timeout = write_timeout
        self.lock = threading.RLock()
        self.requests: Counter[str] = Counter()
        now = time.monotonic()
        self._awaiting_remount: dict[str, float] = {c: now + client_ttl for c in expected_clients if c}

    # ---------------------------------------------------------------- helpers

    def _replicate(self, changes: Iterable[Change]) -> int:
        seq = 0
        for ch in changes:
            if ch.meta is None:
                seq = self.writer.append(OpType.REMOVE, ch.key)
            else:
                seq = self.writer.append(OpType.PUT_END, ch.key, encode_payload(ch.meta.to_wire()))
        return seq

    def _durable(self, seq: int) -> None:
        if seq:
            self.writer.wait_durable(seq, self.write_timeout)

    # ---------------------------------------------------------------- clients and segments

    def ping(self, client_id: str) -> dict[str, Any]:
        self.requests["ping"] += 1
        with self.lock:
            status = self.clients.ping(client_id, time.monotonic())
        return {"client_status": status.value, "view_version": self.view_version}

    def mount_segment(self, client_id: str, segment: dict[str, Any]) -> dict[str, Any]:
        return self.remount_segment(client_id, [segment])

    def remount_segment(self, client_id: str, segments: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests["remount_segment"] += 1
        infos = []
        for raw in segments:
            info = SegmentInfo.from_wire(raw)
            info.client_id = client_id
            infos.append(info)
        with self.lock:
            seq = 0
            for info in infos:
                _, created = self.index.segments.mount(info)
                if created:
                    seq = self.writer.append(OpType.SEGMENT_MOUNT, info.endpoint,
                                             encode_payload(info.to_wire()))
            self.clients.admit(client_id, time.monotonic())
            self._awaiting_remount.pop(client_id, None)
        self._durable(seq)
        return {"mounted": [i.endpoint for i in infos]}

    def unmount_segment(self, client_id: str, endpoint: str) -> dict[str, Any]:
        self.requests["unmount_segment"] += 1
        with self.lock:
            seq = self._unmount(endpoint)
        self._durable(seq)
        return {"unmounted": endpoint}

    def _unmount(self, endpoint: str) -> int:
        seg = self.index.segments.require(endpoint)
        if seg.status is not SegmentStatus.UNMOUNTING:
            self.index.segments.set_status(endpoint, SegmentStatus.UNMOUNTING)
        seq = self._replicate(self.index.drop_segment(endpoint))
        self.index.segments.remove(endpoint)
        return self.writer.append(OpType.SEGMENT_UNMOUNT, endpoint, encode_payload(
            {"transport_endpoint": endpoint})) or seq

    def drain_segment(self, endpoint: str) -> dict[str, Any]:
        self.requests["drain_segment"] += 1
        with self.lock:
            seg = self.index.segments.require(endpoint)
            if seg.status is not SegmentStatus.OK:
                raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS,
                                  f"segment {endpoint!r} is {seg.status.value}, not OK")
            others = [s for s in self.index.segments.all()
                      if s.status is SegmentStatus.OK and s.endpoint != endpoint]
            if not others:
                raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS,
                                  f"segment {endpoint!r}: no other allocatable segment to drain to")
            self.index.segments.set_status(endpoint, SegmentStatus.DRAINING)
        return {"segment": endpoint, "status": SegmentStatus.DRAINING.value}

    def segment_status(self, endpoint: str) -> dict[str, Any]:
        with self.lock:
            seg = self.index.segments.require(endpoint)
            return {"segment": endpoint, "status": seg.status.value,
                    "replicas": self.index.replicas_on(endpoint),
                    "base": seg.info.base, "capacity": seg.info.capacity}

    # ---------------------------------------------------------------- objects

    def put_start(self, client_id: str, key: str, size: Any, replica_num: Any = 1) -> dict[str, Any]:
        self.requests["put_start"] += 1
        size = _count_arg(size, "size")
        replica_num = _count_arg(replica_num, "replica_num")
        with self.lock:
            replicas = self.index.put_start(client_id, key, size, replica_num, time.monotonic())
        return {"replicas": [r.to_wire() for r in replicas]}

    def put_end(self, client_id: str, key: str) -> dict[str, Any]:
        self.requests["put_end"] += 1
        with self.lock:
            seq = self._replicate([self.index.put_end(client_id, key)])
        self._durable(seq)
        return {"key": key, "sequence_id": seq, "view_version": self.view_version}

    def put_revoke(self, client_id: str, key: str) -> dict[str, Any]:
        self.requests["put_revoke"] += 1
        with self.lock:
            self.index.put_revoke(client_id, key)
        return {"key": key}

    def get_replica_list(self, key: str) -> dict[str, Any]:
        self.requests["get_replica_list"] += 1
        with self.lock:
            meta = self.index.get_replica_list(key, time.monotonic())
        return {"key": key, "size": meta.size, "replicas": [r.to_wire() for r in meta.replicas],
                "lease_ttl_ms": int(self.index.lease_ttl * 1000)}

    def exists(self, key: str) -> dict[str, Any]:
        self.requests["exists"] += 1
        with self.lock:
            return {"exists": self.index.exists(key)}

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        self.requests["remove"] += 1
        with self.lock:
            seq = self._replicate([self.index.remove(key, time.monotonic(), bool(force))])
        self._durable(seq)
        return {"key": key, "sequence_id": seq}

    def plant_raw_entry(self, op_type: int, key: str, payload: Any) -> dict[str, Any]:
        """Debug: append an entry to the OpLog without applying it here (fault planting)."""
        raw = payload.encode() if isinstance(payload, str) else encode_payload(payload)
        with self.lock:
            seq = self.writer.append(OpType(op_type), key, raw)
        self._durable(seq)
        return {"sequence_id": seq}

    # ---------------------------------------------------------------- background

    def tick(self) -> None:
        """Expire silent clients (unmounting their segments) and advance drains."""
        now = time.monotonic()
        with self.lock:
            gone = self.clients.expire(now)
            gone += [c for c, deadline in self._awaiting_remount.items() if deadline <= now]
            for c in gone:
                self._awaiting_remount.pop(c, None)
            seq = 0
            for client_id in gone:
                for seg in self.index.segments.of_client(client_id):
                    log.info("client %s expired; unmounting segment %s", client_id, seg.endpoint)
                    seq = self._unmount(seg.endpoint)
            for seg in self.index.segments.all():
                if seg.status is SegmentStatus.DRAINING:
                    seq = self._replicate(self.index.migrate_from(seg.endpoint)) or seq
                    if drained(self.index, seg.endpoint):
                        self.index.segments.set_status(seg.endpoint, SegmentStatus.DRAINED)
        if seq:
            try:
                self._durable(seq)
            except MasterError as exc:
                log.warning("background changes not yet durable: %s", exc)

    def key_count(self) -> int:
        with self.lock:
            return len(self.index)

    def keys(self) -> list[str]:
        with self.lock:
            return self.index.keys()


def _count_arg(value: Any, name: str) -> int:
    """A request's size or count: a u64 integer as sent, never coerced (``10.7`` is not 10 and
    ``true`` is not 1)."""
    try:
        return u64_field(value, name)
    except WireError as exc:
        raise MasterError(ErrorCode.INVALID_PARAMS, f"{exc}, got {_brief(value)}") from None


def _brief(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
