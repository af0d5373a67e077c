"""How a Mooncake build's masters write a snapshot on request and start from it (MP-9), chosen
from the flags the build's own ``mooncake_master --help`` lists; no build version is named.

Two means exist (both store snapshots under ``MOONCAKE_SNAPSHOT_LOCAL_PATH`` with
``--snapshot_object_store_type=local``; without that flag value the master refuses to start):

- ``PeriodicSnapshots`` (``--enable_snapshot`` + ``--enable_snapshot_restore``, 0.3.13 and
  earlier): the serving master forks a child that writes the whole index every
  ``--snapshot_interval_seconds``, counted by ``master_snapshot_success``/``_fail`` in its
  /metrics. Its primary writes none while the OpLog is on, so the cluster runs with
  ``--enable_oplog=false``; a master started with ``--enable_snapshot_restore`` loads the
  newest snapshot as its standby baseline and restores it when it becomes leader.
- ``OplogSnapshots`` (``--enable_oplog_snapshot``, 0.3.14): a standby materialises the OpLog it
  applied into a snapshot (``ha_snapshot_latest_batch`` in its /metrics names the last batch
  it holds; the manifest counts its objects); a new master bootstraps from the newest one and
  replays the OpLog after it.

"On request" is: the masters run with a one-second interval, and ``take`` waits (bounded) for
a snapshot that began after the request and so holds every acknowledged write. A build that
has neither set of flags lacks the means, named from its probed flags (``lack``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.deadlines import TRANSIENT, wait_until
from pytest_mooncake.targets.base import Capability, ObservationFailed, TargetLacks

LOCAL_PATH_ENV = "MOONCAKE_SNAPSHOT_LOCAL_PATH"
"""Where the build's local snapshot object store keeps its files."""
INTERVAL_SECONDS = 1
"""The snapshot period the masters are given (the flag takes whole seconds)."""
TAKE_TIMEOUT = 60.0
"""How long ``take`` waits for a covering snapshot (each one takes about 2 s on this host)."""
SNAPSHOT_ROOT = "mooncake_master_snapshot"
"""The build's directory under ``LOCAL_PATH_ENV``: ``<root>/<cluster_id>/...``."""


class SnapshotMeans:
    """One way a build writes and restores snapshots: the flags it needs, the master settings
    that turn it on, and how a snapshot is awaited and reported."""

    name: str
    flags: tuple[str, ...]
    oplog: bool
    """The ``--enable_oplog`` value this means needs."""

    def settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def take(self, masters: Any, index: int, directory: Path) -> dict[str, Any]:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} ({', '.join('--' + f for f in self.flags)})"


class PeriodicSnapshots(SnapshotMeans):
    name = "periodic snapshots of the serving master"
    flags = ("enable_snapshot", "enable_snapshot_restore", "snapshot_interval_seconds",
             "snapshot_object_store_type")
    oplog = False

    def settings(self) -> dict[str, Any]:
        return {"enable_snapshot": True, "enable_snapshot_restore": True,
                "snapshot_interval_seconds": INTERVAL_SECONDS,
                "snapshot_object_store_type": "local"}

    def take(self, masters: Any, index: int, directory: Path) -> dict[str, Any]:
        """The serving master writes (whatever ``index`` names): wait until two more snapshots
        succeeded than at the request, the second of which began after it; a failed one is an
        ObservationFailed with the master's counters."""
        writer = masters.leader()
        start = masters.metrics(writer)
        objects = int(start.get("master_key_count", 0))
        done = int(start.get("master_snapshot_success", 0)) + 2
        failed = int(start.get("master_snapshot_fail", 0))
        seen: dict[str, float] = {}

        def written() -> bool:
            seen.clear()
            seen.update(_named(masters.metrics(writer), "master_snapshot_"))
            if seen.get("master_snapshot_fail", 0) > failed:
                raise ObservationFailed(
                    f"a snapshot of master {writer} ({masters.build})",
                    f"master_snapshot_fail rose from {failed}: {seen}")
            return seen.get("master_snapshot_success", 0) >= done

        _wait(written, f"master {writer} of {masters.build} to write a snapshot begun after "
                       f"the request (master_snapshot_success {done - 2} -> {done})", seen)
        latest = directory / SNAPSHOT_ROOT / masters.cluster_id / "latest.txt"
        return {"objects": objects, "writer": writer, "means": self.describe(),
                "objects_from": "master_key_count of the serving master at the request",
                "snapshot_id": _read(latest),
                "oplog": "off (the build's primary writes no snapshot while it is on)"}


class OplogSnapshots(SnapshotMeans):
    name = "OpLog snapshots of a standby"
    flags = ("enable_oplog_snapshot", "snapshot_interval_seconds", "snapshot_object_store_type")
    oplog = True

    def settings(self) -> dict[str, Any]:
        return {"enable_oplog_snapshot": True, "snapshot_interval_seconds": INTERVAL_SECONDS,
                "snapshot_object_store_type": "local"}

    def take(self, masters: Any, index: int, directory: Path) -> dict[str, Any]:
        """Standby ``index`` writes: wait until the leader's durable OpLog prefix in etcd
        reaches the OpLog's head at the request (``ha_oplog_last_sequence_id``: every write
        acknowledged before it has an entry at or below it; the leader makes batches durable
        after acknowledging them, so under load the prefix lags), then until the standby's
        newest snapshot holds that prefix (``ha_snapshot_latest_batch``); then count the
        objects its manifest lists (the snapshot's own report)."""
        from pytest_mooncake.targets.mooncake.master_cluster.admin_view import durable_prefix  # noqa: PLC0415

        head = _named(masters.metrics(masters.leader()), "ha_oplog_").get(
            "ha_oplog_last_sequence_id")
        prefix: dict[str, Any] = {}

        def durable() -> bool:
            prefix.clear()
            prefix.update(durable_prefix(masters.etcd, masters.oplog_cluster) or {})
            return head is None or int(prefix.get("last_seq", 0)) >= head

        _wait(durable, f"the leader of {masters.build} to make its OpLog durable in etcd up to "
                       f"its head at the request (sequence {head})", prefix)
        target = int(prefix.get("batch_id", 0))
        if target == 0:  # nothing durable yet: the standby skips (no new batch), none is needed
            return {"objects": 0, "writer": index, "means": self.describe(),
                    "objects_from": "the leader's OpLog in etcd, which holds no batch yet",
                    "snapshot_id": None, "oplog": "empty"}
        seen: dict[str, float] = {}

        def written() -> bool:
            seen.clear()
            seen.update(_named(masters.metrics(index), "ha_snapshot_"))
            if "ha_snapshot_latest_batch" not in seen:
                raise TargetLacks(Capability.MASTER_SNAPSHOT, (
                    f"mooncake_master of {masters.build} reports no ha_snapshot_latest_batch "
                    f"in its /metrics (master {index}): which snapshot it wrote cannot be seen"))
            return seen["ha_snapshot_latest_batch"] >= target

        _wait(written, f"standby {index} of {masters.build} to write a snapshot holding OpLog "
                       f"batch {target} (the durable prefix at the request)", seen)
        batch = int(seen["ha_snapshot_latest_batch"])
        manifest = _manifest(directory / SNAPSHOT_ROOT / masters.cluster_id, batch)
        return {"objects": (sum(int(c.get("object_count", 0)) for c in
                                manifest.get("object_chunks", [])) if manifest else None),
                "writer": index, "means": self.describe(),
                "objects_from": "object_count of the snapshot's manifest.json",
                "snapshot_id": manifest.get("snapshot_id") if manifest else None,
                "last_included_batch_id": batch,
                "last_included_seq": manifest.get("last_included_seq") if manifest else None,
                "oplog": f"kept in etcd; the snapshot holds all of it (batch {batch} >= the "
                         f"durable prefix's {target}, which reached the OpLog's head at the "
                         f"request, sequence {head})"}


MEANS: tuple[SnapshotMeans, ...] = (PeriodicSnapshots(), OplogSnapshots())
"""Preferred first: where a build had both, the one without an OpLog restores from nothing
but the snapshot."""


def means_for(flags: Mapping[str, Any]) -> SnapshotMeans | None:
    """The first means whose every flag the build's master lists."""
    return next((m for m in MEANS if all(f in flags for f in m.flags)), None)


def lack(flags: Mapping[str, Any], build: str, source: str) -> str | None:
    """Why ``build``'s masters cannot be made to write and restore a snapshot, naming what each
    means needs and what the probe found; None when one means is complete."""
    if means_for(flags) is not None:
        return None
    missing = "; ".join(
        f"{m.name} need {', '.join('--' + f for f in m.flags if f not in flags)}" for m in MEANS)
    have = sorted(f for m in MEANS for f in m.flags if f in flags)
    return (f"{build} offers no means to have a snapshot written on request: {missing} "
            f"(snapshot flags it has, probed from {source}: "
            f"{', '.join('--' + f for f in sorted(set(have))) or 'none'})")


def refuse_oplog(means: SnapshotMeans, asked: bool | None, build: str) -> None:
    """``oplog=...`` that contradicts the means is n/a, naming why."""
    if asked is not None and bool(asked) != means.oplog:
        raise TargetLacks(Capability.MASTER_SNAPSHOT, (
            f"snapshots=True with oplog={asked}: {build} writes snapshots through "
            f"{means.describe()}, which needs --enable_oplog={str(means.oplog).lower()}"))


def _named(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.startswith(prefix) and "{" not in k}


def _wait(probe: Any, what: str, seen: Mapping[str, float]) -> None:
    try:
        wait_until(probe, TAKE_TIMEOUT, what, interval=0.1, max_interval=0.5, ignore=TRANSIENT)
    except TimeoutError:
        raise ObservationFailed(what, f"none within {TAKE_TIMEOUT:g}s; last counters "
                                      f"{dict(seen)}") from None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _manifest(root: Path, batch: int) -> dict[str, Any]:
    """The manifest.json of the OpLog snapshot holding ``batch`` under ``root`` ({} if none is
    readable from here)."""
    for path in sorted(root.glob("batch-oplog/*/manifest.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("last_included_batch_id") == batch:
            return doc
    return {}
