"""The hot standby: follows the OpLog in etcd into a replicated state, strictly in order.

How it gets its baseline (snapshot, full replay, or none) is the profile's choice; everything
else (polling the durable prefix, reading batches, applying, the state machine) is here.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from reference_engine.master.applier import OpLogApplier, SequenceGap
from reference_engine.master.ha_failures import is_ha_store_failure
from reference_engine.master.oplog_store import OpLogInconsistent, OpLogStore
from reference_engine.master.promotion import PromotionContext
from reference_engine.master.replicated import ReplicatedState
from reference_engine.master.snapshots import Snapshot, SnapshotStore
from reference_engine.master.standby_state import (
    BaselineOutcome,
    StandbyEvent,
    StandbyState,
    StandbyStateMachine,
)

log = logging.getLogger("reference_engine.master.standby")
E = StandbyEvent


class Baseline(Protocol):
    """How a fresh standby gets its state: a profile's strategy (``master_policies``), which
    works through the standby's operations and returns what the standby should do next."""

    def bootstrap(self, standby: HotStandby) -> BaselineOutcome: ...


@dataclass(frozen=True)
class SyncStatus:
    state: str
    applied_seq: int
    primary_seq: int
    applied_batch_id: int
    baseline_complete: bool
    problem: str | None

    @property
    def lag(self) -> int:
        return max(0, self.primary_seq - self.applied_seq)


class HotStandby:
    def __init__(
        self,
        store: OpLogStore,
        baseline: Baseline,
        poll_interval: float = 0.2,
        snapshots: SnapshotStore | None = None,
        batch_read_limit: int = 16,
        replay_delay: float = 0.0,
    ):
        self.store = store
        self.baseline = baseline
        self.poll_interval = poll_interval
        self.snapshots = snapshots
        self.batch_read_limit = batch_read_limit
        self.replay_delay = replay_delay
        """Seconds to pause per batch while building the baseline (models a slow replay)."""
        self.state = ReplicatedState()
        self.applier = OpLogApplier(self.state)
        self.machine = StandbyStateMachine()
        self.applied_batch_id = 0
        self.primary_seq = 0
        self.prefix_batch_id = 0
        self.baseline_complete = False
        self.problem: str | None = None
        self.snapshot_loaded: Snapshot | None = None
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.machine.fire(E.START)
        self._thread = threading.Thread(target=self._run, name="hot-standby", daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as the standby is being stopped."""
        return self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.machine.fire(E.STOP)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.store.read_prefix()
            except Exception as exc:  # noqa: BLE001
                if not is_ha_store_failure(exc):
                    raise
                self._stop.wait(self.poll_interval)
                continue
            break
        if self._stop.is_set():
            return
        self.machine.fire(E.CONNECTED)
        try:
            outcome = self.baseline.bootstrap(self)
        except Exception as exc:  # noqa: BLE001
            log.exception("standby baseline failed")
            self.problem = f"baseline failed: {exc}"
            self.machine.fire(E.FATAL_ERROR)
            return
        if outcome is BaselineOutcome.STOPPED:
            return
        self.baseline_complete = True
        self.machine.fire(E.SYNC_COMPLETE)
        while not self._stop.wait(self.poll_interval):
            self.poll_once()

    # ---------------------------------------------------------------- replication

    def poll_once(self) -> bool:
        """Read the durable prefix and apply what is new; False on a failure (state updated)."""
        try:
            self._poll()
        except (OpLogInconsistent, SequenceGap) as exc:
            self.problem = str(exc)
            log.error("OpLog cannot be followed: %s", exc)
            if self.machine.state is StandbyState.WATCHING:
                self.machine.fire(E.MAX_ERRORS_REACHED)
            return False
        except Exception as exc:  # noqa: BLE001
            if not is_ha_store_failure(exc):
                raise
            if self.machine.state is StandbyState.WATCHING:
                self.machine.fire(E.DISCONNECTED)
            return False
        if self.machine.state in (StandbyState.RECONNECTING, StandbyState.RECOVERING):
            self.machine.fire(E.RECOVERY_SUCCESS if self.baseline_complete else E.CONNECTED)
        elif self.machine.state is StandbyState.WATCHING:
            self.machine.fire(E.WATCH_HEALTHY)
        return True

    def _poll(self) -> None:
        stored = self.store.read_prefix()
        prefix = stored.prefix
        with self.lock:
            if prefix.last_seq < self.applier.applied_seq:
                raise OpLogInconsistent(
                    f"durable prefix regressed to {prefix.last_seq} below applied "
                    f"{self.applier.applied_seq}"
                )
            self.primary_seq = max(self.primary_seq, prefix.last_seq)
            self.prefix_batch_id = prefix.batch_id
        slow = self.replay_delay > 0 and not self.baseline_complete
        while True:
            with self.lock:
                if self.applied_batch_id >= prefix.batch_id:
                    break
                limit = 1 if slow else self.batch_read_limit
                try:
                    batches = self.store.read_batches(self.applied_batch_id, prefix.batch_id, limit)
                except Exception as exc:  # noqa: BLE001
                    if limit > 1 and _too_large(exc):
                        self.batch_read_limit = max(1, limit // 2)
                        continue
                    raise
                for rec in batches:
                    self.applier.apply_batch(rec.entries, prefix.last_seq)
                    self.applied_batch_id = rec.batch_id
            if slow:
                time.sleep(self.replay_delay)
        with self.lock:
            if self.problem and self.baseline_complete and self.applier.applied_seq >= prefix.last_seq:
                self.problem = None

    def refresh_primary(self) -> None:
        """Learn the primary's durable sequence without applying anything."""
        prefix = self.store.read_prefix().prefix
        with self.lock:
            self.primary_seq = max(self.primary_seq, prefix.last_seq)

    def catch_up(self, timeout: float) -> bool:
        """Poll until applied == durable prefix (True) or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            if self.poll_once() and self.applier.applied_seq >= self.primary_seq:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(self.poll_interval, 0.05))

    def jump_to_prefix(self) -> None:
        """Start watching from the current prefix without replaying history (legacy)."""
        stored = self.store.read_prefix()
        self.applier.recover(stored.prefix.last_seq)
        self.applied_batch_id = stored.prefix.batch_id
        self.primary_seq = stored.prefix.last_seq

    def install_snapshot(self, snap: Snapshot, keep_objects: bool = True) -> None:
        with self.lock:
            self.state.clear()
            self.state.segments.update(snap.state.segments)
            if keep_objects:
                self.state.objects.update(snap.state.objects)
            self.applier.recover(snap.last_included_seq)
            self.applied_batch_id = snap.last_included_batch_id
            self.snapshot_loaded = snap

    # ---------------------------------------------------------------- views

    def status(self) -> SyncStatus:
        return SyncStatus(
            state=self.machine.state.name,
            applied_seq=self.applier.applied_seq,
            primary_seq=self.primary_seq,
            applied_batch_id=self.applied_batch_id,
            baseline_complete=self.baseline_complete,
            problem=self.problem,
        )

    def context(self) -> PromotionContext:
        with self.lock:
            return PromotionContext.of(self.state, self.applier.applied_seq)

    def consistent_snapshot(self, producer_view: int) -> Snapshot | None:
        """The state at a consistent point (applied == durable prefix), or None."""
        self._poll()
        with self.lock:
            if self.applier.applied_seq != self.primary_seq or not self.baseline_complete:
                return None
            return Snapshot(
                last_included_seq=self.applier.applied_seq,
                last_included_batch_id=self.applied_batch_id if self.applier.applied_seq else 0,
                producer_view_version=producer_view,
                state=self.state.copy(),
            )


def _too_large(exc: BaseException) -> bool:
    """etcd's answer exceeded the gRPC message limit: read fewer batches at a time."""
    code = getattr(exc, "code", None)
    try:
        return callable(code) and code().name == "RESOURCE_EXHAUSTED"
    except Exception:  # noqa: BLE001
        return False
