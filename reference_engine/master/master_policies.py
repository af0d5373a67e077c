"""The master's and the store client's strategies: ``rfc`` (every MP requirement) and ``legacy``
(0.3.13) pick one of each in the profile registry (``reference_engine.profiles``).

Each concern where the two differ is one strategy:

- ``baseline``: how a fresh standby gets its state (rfc: snapshot + full replay, "synced" only
  once caught up; legacy: "SYNC_COMPLETE" at once, watching forward, and a snapshot restore that
  keeps the segments and loses the objects while reporting success);
- ``promotability``: what ``/ha/promotable`` answers (rfc: caught up and the dry run passes;
  legacy: the state machine is WATCHING);
- ``promotion``: whether to campaign and how to restore (rfc: validate first, refuse or restore
  partially; legacy: campaign when watching, warm up, validate after taking leadership,
  all-or-nothing, and serve empty on failure);
- ``versions``: the version check (rfc: major-compatible at the handshake, rejections logged;
  legacy: handshake accepts anything, writes from another version fail silently);
- ``lag``: the exported ``ha_oplog_standby_lag`` (rfc: honest; legacy: always 0);
- ``reattach``: the store client's behaviour after its master dies (rfc: re-resolve the leader
  and reattach within a bound; legacy: keep waiting on the old connection for a long stall).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.index import ObjectIndex
from reference_engine.master.promotion import (
    PromotionContext,
    RestoreRejected,
    ValidationReport,
    restore,
    validate,
)
from reference_engine.master.segments import SegmentRegistry
from reference_engine.master.standby_state import BaselineOutcome

if TYPE_CHECKING:
    from reference_engine.master.standby import HotStandby

log = logging.getLogger("reference_engine.master")

OBJECT_WRITE_OPS = frozenset({"put_start", "put_end", "put_revoke", "remove"})
"""The write path 0.3.13 rejected from a skewed client (mounting and reads kept working)."""


# ------------------------------------------------------------------------------ baseline


class StandbyBaseline:
    """Builds a fresh standby's state through the standby's own operations (snapshot install,
    polling, jumping to the durable prefix) and says how it ended; the standby acts on that."""

    def bootstrap(self, standby: HotStandby) -> BaselineOutcome:
        raise NotImplementedError


class ReplayBaseline(StandbyBaseline):
    """Latest valid snapshot, then every OpLog batch after it; synced only when caught up."""

    def bootstrap(self, standby: HotStandby) -> BaselineOutcome:
        snap = standby.snapshots.load_latest() if standby.snapshots else None
        if snap is not None:
            standby.install_snapshot(snap, keep_objects=True)
            log.info("standby baseline: snapshot %s (seq %d, %d objects)%s", snap.path.name,
                     snap.last_included_seq, snap.object_count,
                     f"; skipped bad newer snapshots: {snap.skipped}" if snap.skipped else "")
        while not standby.stopping:
            if standby.poll_once() and standby.applier.applied_seq >= standby.primary_seq:
                break
            standby.wait(standby.poll_interval)
        if standby.stopping:
            return BaselineOutcome.STOPPED
        log.info("standby caught up: applied seq %d of %d (%d objects)",
                 standby.applier.applied_seq, standby.primary_seq, len(standby.state.objects))
        return BaselineOutcome.SYNCED


class WatchForwardBaseline(StandbyBaseline):
    """0.3.13: no replay of history; a snapshot restore keeps segments only, yet says success."""

    def bootstrap(self, standby: HotStandby) -> BaselineOutcome:
        snap = standby.snapshots.load_latest() if standby.snapshots else None
        if snap is not None:
            standby.install_snapshot(snap, keep_objects=False)
            log.info("Snapshot restore succeeded: %d objects, %d segments (seq %d)",
                     snap.object_count, len(snap.state.segments), snap.last_included_seq)
        else:
            standby.jump_to_prefix()
        log.info("OpLogApplier: recovered from sequence_id=%d; SYNCING -> WATCHING (SYNC_COMPLETE)",
                 standby.applier.applied_seq)
        return BaselineOutcome.SYNCED


# ------------------------------------------------------------------------------ promotability


@dataclass
class Promotability:
    promotable: bool
    reason: str
    validation: dict[str, Any]
    applied_seq: int
    primary_seq: int
    keys_restorable: int
    state: str
    report: ValidationReport | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "promotable": self.promotable,
            "reason": self.reason,
            "validation": self.validation,
            "applied_seq": self.applied_seq,
            "primary_seq": self.primary_seq,
            "keys_restorable": self.keys_restorable,
            "state": self.state,
        }


class PromotabilityPolicy:
    def assess(self, standby: HotStandby) -> Promotability:
        raise NotImplementedError


class HonestPromotability(PromotabilityPolicy):
    """Promotable = promoted now, the index comes up intact: caught up and the dry run passes."""

    def assess(self, standby: HotStandby) -> Promotability:
        st = standby.status()
        base = dict(applied_seq=st.applied_seq, primary_seq=st.primary_seq, state=st.state)
        not_run = {"ok": None, "dropped_entries": None}
        if not st.baseline_complete:
            reason = st.problem or "no baseline yet: replaying the OpLog"
            return Promotability(False, reason, not_run, keys_restorable=0, **base)
        if st.problem:
            return Promotability(False, st.problem, not_run, keys_restorable=0, **base)
        report = validate(standby.context())
        validation = {"ok": report.ok, "dropped_entries": report.dropped_entries,
                      "dropped": [d.to_json() for d in report.dropped[:20]],
                      "seconds": round(report.seconds, 6)}
        if st.applied_seq < st.primary_seq:
            reason = f"behind the primary: applied {st.applied_seq} of {st.primary_seq}"
            return Promotability(False, reason, validation, keys_restorable=report.keys_restorable,
                                 report=report, **base)
        if not report.ok:
            first = report.dropped[0]
            reason = (f"dry-run validation would drop {report.dropped_entries} entries "
                      f"(first: {first.kind} {first.key!r}: {first.reason})")
            return Promotability(False, reason, validation, keys_restorable=report.keys_restorable,
                                 report=report, **base)
        return Promotability(True, "caught up and the promotion context validates", validation,
                             keys_restorable=report.keys_restorable, report=report, **base)


class WatchingPromotability(PromotabilityPolicy):
    """0.3.13's IsReadyForPromotion: WATCHING, whatever the lag or the context."""

    def assess(self, standby: HotStandby) -> Promotability:
        st = standby.status()
        watching = standby.machine.is_watching
        return Promotability(
            watching, "standby is WATCHING" if watching else f"standby is {st.state}",
            {"ok": None, "dropped_entries": None}, st.applied_seq, st.primary_seq,
            keys_restorable=len(standby.state.objects), state=st.state,
        )


# ------------------------------------------------------------------------------ promotion


class PromotionPolicy:
    partial_restore = False

    def may_campaign(self, standby: HotStandby, catch_up_timeout: float) -> tuple[bool, str]:
        raise NotImplementedError

    def build_index(self, ctx: PromotionContext, **index_options: Any) -> tuple[ObjectIndex, ValidationReport | None]:
        raise NotImplementedError

    warmup_seconds = 0.0


class ValidateBeforePromotion(PromotionPolicy):
    """Dry-run before campaigning; refuse on failure unless partial restore is enabled."""

    def __init__(self, partial_restore: bool = False):
        self.partial_restore = partial_restore
        self.promotability = HonestPromotability()

    def may_campaign(self, standby: HotStandby, catch_up_timeout: float) -> tuple[bool, str]:
        standby.catch_up(catch_up_timeout)
        verdict = self.promotability.assess(standby)
        if verdict.promotable:
            return True, verdict.reason
        caught_up = (verdict.report is not None and verdict.applied_seq >= verdict.primary_seq)
        if self.partial_restore and caught_up:
            return True, f"partial restore: {verdict.reason}"
        return False, verdict.reason

    def build_index(self, ctx: PromotionContext, **index_options: Any) -> tuple[ObjectIndex, ValidationReport | None]:
        index, report = restore(ctx, partial=self.partial_restore, **index_options)
        if report.dropped:
            log.warning("promotion dropped %d invalid entries: %s", report.dropped_entries,
                        [d.to_json() for d in report.dropped[:20]])
        log.info("promotion restored %d objects", len(index))
        return index, report


class PromoteThenValidate(PromotionPolicy):
    """0.3.13: campaign when WATCHING, warm up, then all-or-nothing restore; failure = empty."""

    def __init__(self, warmup_seconds: float = 0.0):
        self.warmup_seconds = warmup_seconds

    def may_campaign(self, standby: HotStandby, catch_up_timeout: float) -> tuple[bool, str]:
        if standby.machine.is_watching:
            return True, "standby is WATCHING"
        return False, f"standby is {standby.machine.state.name}"

    def build_index(self, ctx: PromotionContext, **index_options: Any) -> tuple[ObjectIndex, ValidationReport | None]:
        log.info("Promoting Standby to Primary. Applied seq_id: %d", ctx.applied_seq)
        try:
            index, report = restore(ctx, partial=False, **index_options)
        except RestoreRejected as exc:
            log.error("RestoreFromStandbySnapshot: %s", exc)
            log.error("Standby restore failed: INVALID_PARAMS")
            return ObjectIndex(SegmentRegistry(), **index_options), exc.report
        return index, report


# ------------------------------------------------------------------------------ versions


def major(version: str) -> str:
    return version.split(".", 1)[0]


class VersionGate:
    def on_hello(self, client_version: str, server_version: str, peer: str, client_id: str) -> None:
        """Raise MasterError to reject the connection."""

    def on_request(self, op: str, client_version: str, server_version: str) -> None:
        """Raise MasterError to reject one request."""


class CompatibleVersionGate(VersionGate):
    """Same major version is compatible (unknown fields ignored); rejections are logged."""

    def on_hello(self, client_version: str, server_version: str, peer: str, client_id: str) -> None:
        if not client_version or major(client_version) != major(server_version):
            log.warning("rejected client %r from %s: client version %r is incompatible with "
                        "master version %r", client_id, peer, client_version, server_version)
            raise MasterError(
                ErrorCode.INVALID_VERSION,
                f"client version {client_version!r} is incompatible with master {server_version!r}",
            )


class ExactVersionOnWrites(VersionGate):
    """0.3.13: the handshake passes; writes from another version fail, with no master log."""

    def on_request(self, op: str, client_version: str, server_version: str) -> None:
        if op in OBJECT_WRITE_OPS and client_version != server_version:
            raise MasterError(ErrorCode.INVALID_RPC_ARGUMENTS, "invalid rpc arg")


# ------------------------------------------------------------------------------ lag, reattach


class LagMetric:
    def value(self, applied_seq: int, primary_seq: int) -> int:
        return max(0, primary_seq - applied_seq)


class ZeroLagMetric(LagMetric):
    def value(self, applied_seq: int, primary_seq: int) -> int:
        return 0


class ReattachPolicy:
    """What a store client does when a call to its master fails at the connection level."""

    watch_leader = False
    """Whether the client watches the leader key in etcd (and so reacts to a change at once)."""

    def before_rediscovery(self, wait: Any) -> None:
        """Called before the client looks the leader up again; ``wait(seconds)`` sleeps
        interruptibly."""


class BoundedReattach(ReattachPolicy):
    watch_leader = True


class StalledReattach(ReattachPolicy):
    """0.3.13's ~121 s: the client keeps waiting on its old connection before re-resolving."""

    def __init__(self, stall_seconds: float):
        self.stall_seconds = stall_seconds

    def before_rediscovery(self, wait: Any) -> None:
        wait(self.stall_seconds)


# ------------------------------------------------------------------------------ bundle


@dataclass(frozen=True)
class MasterPolicies:
    """One master's strategies, built per process from its options (``Profile.master_policies``)."""

    baseline: StandbyBaseline
    promotability: PromotabilityPolicy
    promotion: PromotionPolicy
    versions: VersionGate
    lag: LagMetric
