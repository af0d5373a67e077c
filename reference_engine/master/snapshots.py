"""Snapshots of the replicated state on disk: atomic write, checksum, last included sequence.

A snapshot is one JSON file ``snapshot-<last_included_seq:020d>.json``:
``{"header": {...}, "body": {...}, "sha256": hex}`` where the digest covers the compact JSON of
header+body. Written to a temp file, fsynced, renamed, directory fsynced; the newest ``retain``
are kept. Loading verifies the digest and falls back to an older snapshot when the newest is bad.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_engine.master.model import SegmentInfo, WireError
from reference_engine.master.replicated import ReplicatedState

FORMAT = "reference-standby-materialized/v1"
SCHEMA_VERSION = 1


class SnapshotError(ValueError):
    """A snapshot file that does not verify; the message names the file and the field."""


@dataclass
class Snapshot:
    last_included_seq: int
    last_included_batch_id: int
    producer_view_version: int
    state: ReplicatedState
    created_at_ms: int = 0
    path: Path | None = None
    skipped: list[str] = field(default_factory=list)
    """Newer snapshot files that failed verification while this one was loaded."""

    @property
    def object_count(self) -> int:
        return len(self.state.objects)


class SnapshotStore:
    def __init__(self, directory: str | os.PathLike[str], retain: int = 2):
        self.dir = Path(directory)
        self.retain = max(1, retain)

    def write(self, snap: Snapshot) -> Path:
        if (snap.last_included_seq == 0) != (snap.last_included_batch_id == 0):
            raise SnapshotError("last_included_seq and last_included_batch_id: both zero or both non-zero")
        self.dir.mkdir(parents=True, exist_ok=True)
        header = {
            "schema_version": SCHEMA_VERSION,
            "snapshot_format": FORMAT,
            "snapshot_id": f"batch-{snap.last_included_batch_id:020d}",
            "last_included_seq": snap.last_included_seq,
            "last_included_batch_id": snap.last_included_batch_id,
            "producer_view_version": snap.producer_view_version,
            "created_at_ms": int(time.time() * 1000),
            "object_count": len(snap.state.objects),
            "segment_count": len(snap.state.segments),
        }
        body = {
            "segments": [s.to_wire() for s in snap.state.segments.values()],
            "objects": snap.state.objects,
        }
        digest = hashlib.sha256(_compact([header, body])).hexdigest()
        data = _compact({"header": header, "body": body, "sha256": digest})
        final = self.dir / f"snapshot-{snap.last_included_seq:020d}.json"
        tmp = self.dir / f".{final.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.dir)
        self._prune()
        return final

    def paths(self) -> list[Path]:
        """Snapshot files, newest first."""
        if not self.dir.is_dir():
            return []
        return sorted(self.dir.glob("snapshot-*.json"), reverse=True)

    def load_latest(self) -> Snapshot | None:
        skipped = []
        for path in self.paths():
            try:
                snap = self.load(path)
            except SnapshotError as exc:
                skipped.append(str(exc))
                continue
            snap.skipped = skipped
            return snap
        return None

    def load(self, path: Path) -> Snapshot:
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise SnapshotError(f"{path.name}: unreadable ({exc})") from None
        if not isinstance(doc, dict):
            raise SnapshotError(f"{path.name}: not a JSON object")
        header, body, digest = doc.get("header"), doc.get("body"), doc.get("sha256")
        if not isinstance(header, dict) or not isinstance(body, dict):
            raise SnapshotError(f"{path.name}: header/body missing")
        if hashlib.sha256(_compact([header, body])).hexdigest() != digest:
            raise SnapshotError(f"{path.name}.sha256: checksum mismatch")
        if header.get("snapshot_format") != FORMAT:
            raise SnapshotError(f"{path.name}.snapshot_format: {header.get('snapshot_format')!r}")
        for name in ("last_included_seq", "last_included_batch_id", "producer_view_version"):
            if not isinstance(header.get(name), int) or header[name] < 0:
                raise SnapshotError(f"{path.name}.{name}: not a non-negative integer")
        objects = body.get("objects")
        if not isinstance(objects, dict):
            raise SnapshotError(f"{path.name}.objects: not an object")
        state = ReplicatedState(objects=objects)
        for i, raw in enumerate(body.get("segments") or []):
            try:
                info = SegmentInfo.from_wire(raw)
            except WireError as exc:
                raise SnapshotError(f"{path.name}.segments[{i}]: {exc}") from None
            state.segments[info.endpoint] = info
        if header.get("object_count") != len(objects):
            raise SnapshotError(f"{path.name}.object_count: header says {header.get('object_count')}, body has {len(objects)}")
        return Snapshot(
            last_included_seq=header["last_included_seq"],
            last_included_batch_id=header["last_included_batch_id"],
            producer_view_version=header["producer_view_version"],
            state=state,
            created_at_ms=header.get("created_at_ms", 0),
            path=path,
        )

    def _prune(self) -> None:
        for old in self.paths()[self.retain:]:
            try:
                old.unlink()
            except OSError:
                pass


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
