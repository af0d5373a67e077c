"""Applies OpLog entries to a standby's replicated state, strictly in sequence order."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable
from dataclasses import dataclass

from reference_engine.master.model import SegmentInfo, WireError
from reference_engine.master.oplog import OpLogEntry, OpType
from reference_engine.master.replicated import CORRUPT, ReplicatedState

_loads = json.JSONDecoder().decode


class SequenceGap(Exception):
    """An entry arrived ahead of the expected sequence: something between was lost."""


@dataclass
class ApplyStats:
    applied_entries: int = 0
    skipped_entries: int = 0
    corrupt_payloads: int = 0


class OpLogApplier:
    def __init__(self, state: ReplicatedState):
        self.state = state
        self.expected_seq = 1
        self.stats = ApplyStats()

    @property
    def applied_seq(self) -> int:
        return self.expected_seq - 1

    def recover(self, last_applied: int) -> None:
        """Continue after ``last_applied`` (baseline from a snapshot)."""
        self.expected_seq = last_applied + 1

    def apply_batch(self, entries: Iterable[OpLogEntry], upto_seq: int | None = None) -> int:
        """Apply a batch's entries (those ``<= upto_seq``) with the cyclic GC paused: the
        decoded payloads are many small containers, and collections scanning a large replicated
        state would otherwise cost more than the applying."""
        applied = 0
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            for entry in entries:
                if upto_seq is not None and entry.sequence_id > upto_seq:
                    break
                applied += self.apply(entry)
        finally:
            if was_enabled:
                gc.enable()
        return applied

    def apply(self, entry: OpLogEntry) -> bool:
        """Apply one entry; an already-applied sequence is skipped (returns False)."""
        if entry.sequence_id < self.expected_seq:
            self.stats.skipped_entries += 1
            return False
        if entry.sequence_id > self.expected_seq:
            raise SequenceGap(
                f"OpLog sequence gap: expected {self.expected_seq}, got {entry.sequence_id}"
            )
        self._apply(entry)
        self.expected_seq = entry.sequence_id + 1
        self.stats.applied_entries += 1
        return True

    def _apply(self, entry: OpLogEntry) -> None:
        op = entry.op_type
        objects = self.state.objects
        if op is OpType.PUT_END:
            try:
                value = _loads(entry.payload.decode())
                if not isinstance(value, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError):
                self.stats.corrupt_payloads += 1
                value = CORRUPT
            objects.pop(entry.object_key, None)
            objects[entry.object_key] = value
        elif op is OpType.REMOVE or op is OpType.PUT_REVOKE:
            objects.pop(entry.object_key, None)
        elif op is OpType.SEGMENT_MOUNT or op is OpType.SEGMENT_UPDATE:
            try:
                info = SegmentInfo.from_wire(json.loads(entry.payload))
            except (ValueError, UnicodeDecodeError, WireError):
                self.stats.corrupt_payloads += 1
                return
            self.state.segments[info.endpoint] = info
        elif op is OpType.SEGMENT_UNMOUNT:
            self.state.segments.pop(entry.object_key, None)
        # LEASE_RENEW: leases are not replicated; accepted and ignored.
