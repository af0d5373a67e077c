"""A master process: standby until it wins the election, then the serving leader.

The loop follows Mooncake's MasterServiceSupervisor: start as a hot standby; while a leader
exists, follow it; when none does (or a planned handover names us), ask the profile whether to
campaign; on winning, promote (final catch-up, export the context, restore) and serve while the
lease is certainly alive; on losing the lease, being fenced or handing over, step down and start
again as a standby.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from reference_engine.hub import BINARY_LIMITS, HTTP_LIMITS, Limits
from reference_engine.master.admin import AdminServer
from reference_engine.master.election import LeaderSession, LeaderView
from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.ha_backends import open_ha_backend
from reference_engine.master.ha_failures import is_ha_store_failure
from reference_engine.master.node_view import Replication, sample_replication
from reference_engine.master.oplog_store import Fenced
from reference_engine.master.promotion import ValidationReport
from reference_engine.master.protocol import MASTER_VERSION
from reference_engine.master.rpc_server import Connection, RpcServer
from reference_engine.master.service import MasterService
from reference_engine.master.snapshots import SnapshotStore
from reference_engine.master.standby import HotStandby
from reference_engine.master.standby_state import StandbyEvent
from reference_engine.master.writer import OpLogWriter
from reference_engine.profiles import get_profile

log = logging.getLogger("reference_engine.master")


@dataclass
class MasterConfig:
    etcd: list[str]
    cluster_id: str
    redis: str | None = None
    """``host:port`` of the Redis the masters keep their HA state in instead of etcd."""
    rpc: tuple[str, int] = ("127.0.0.1", 0)
    admin: tuple[str, int] = ("127.0.0.1", 0)
    profile: str = "rfc"
    lease_ttl: int = 2
    poll_interval: float = 0.1
    client_ttl: float = 10.0
    kv_lease_ttl: float = 10.0
    etcd_timeout: float = 1.0
    write_timeout: float = 5.0
    catch_up_timeout: float = 5.0
    partial_restore: bool = False
    warmup: float | None = None
    snapshot_dir: str | None = None
    snapshot_interval: float = 0.0
    trim_oplog_after_snapshot: bool = False
    enable_fault_planting: bool = False
    batch_max_entries: int = 1024
    handover_ttl: int = 5
    replay_delay: float = 0.0
    rpc_limits: Limits = BINARY_LIMITS
    admin_limits: Limits = HTTP_LIMITS


class MasterNode:
    def __init__(self, cfg: MasterConfig):
        self.cfg = cfg
        self.profile = get_profile(cfg.profile)
        self.policies = self.profile.master_policies(
            partial_restore=cfg.partial_restore, warmup_seconds=cfg.warmup, lease_ttl=cfg.lease_ttl)
        self.ha = open_ha_backend(f"redis://{cfg.redis}" if cfg.redis else cfg.etcd,
                                  timeout=cfg.etcd_timeout)
        self.store = self.ha.oplog_store(cfg.cluster_id)
        self.snapshots = SnapshotStore(cfg.snapshot_dir) if cfg.snapshot_dir else None
        self.rpc = RpcServer(cfg.rpc[0], cfg.rpc[1], self._hello, self._handle, cfg.rpc_limits)
        self.address = self.rpc.address
        self.election = self.ha.election(cfg.cluster_id, self.address, cfg.lease_ttl,
                                         margin=min(0.5, cfg.lease_ttl / 4))
        self.handover_key = self.ha.record_key(cfg.cluster_id, "handover")
        self.standby: HotStandby | None = None
        self.session: LeaderSession | None = None
        self.service: MasterService | None = None
        self._serving = False
        self.runtime_state = "starting"
        self.leader_view: LeaderView | None = None
        self.last_validation: ValidationReport | None = None
        self.last_refusal: str | None = None
        self.counters: Counter[str] = Counter()
        self.snapshot_counters: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lead_stop = threading.Event()
        self._last_snapshot = time.monotonic()
        self.admin = AdminServer(cfg.admin[0], cfg.admin[1], view=self, actions=self,
                                 limits=cfg.admin_limits)

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        self.rpc.start()
        self.admin.start()
        log.info("master %s (profile %s, version %s) admin %s, cluster %s on %s", self.address,
                 self.profile.name, MASTER_VERSION, self.admin.address, self.cfg.cluster_id,
                 self.ha.location)
        try:
            while not self._stop.is_set():
                self.standby = HotStandby(self.store, self.policies.baseline, self.cfg.poll_interval,
                                          self.snapshots, replay_delay=self.cfg.replay_delay)
                self.standby.start()
                self.runtime_state = "standby"
                session = self._campaign()
                if session is None:
                    break
                self._lead(session)
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop.set()
        self._lead_stop.set()

    def _shutdown(self) -> None:
        self._serving = False
        if self.standby is not None:
            self.standby.stop()
        if self.session is not None and not self.session.released:
            self.session.release()
        self.rpc.close()
        self.admin.close()
        log.info("master %s stopped", self.address)

    # ------------------------------------------------------------------ standby side

    @property
    def serving(self) -> bool:
        """Serving as the leader now: promoted, not stepped down, and the lease certainly alive.
        The lease is checked here too, so ``service_ready`` turns false the moment the lease
        may have run out, not when the leader loop (which can be blocked on a slow etcd) next
        notices."""
        session = self.session
        return self._serving and session is not None and session.valid()

    @property
    def role(self) -> str:
        return "leader" if self.runtime_state in ("leader_warmup", "serving") else "standby"

    def _campaign(self) -> LeaderSession | None:
        while not self._stop.wait(self.cfg.poll_interval):
            try:
                self._maybe_snapshot()
                view = self.election.current()
                self.leader_view = view
                if view is not None:
                    self.runtime_state = "standby"
                    continue
                if self._handover_names_other():
                    continue
                self.runtime_state = "candidate"
                ok, reason = self.policies.promotion.may_campaign(self.standby, self.cfg.catch_up_timeout)
                if not ok:
                    self._refuse(reason)
                    continue
                self.last_refusal = None
                session = self.election.try_acquire()
                if session is not None:
                    log.info("acquired leadership, view_version %d (%s)", session.view_version, reason)
                    return session
            except Exception as exc:  # noqa: BLE001
                if not is_ha_store_failure(exc):
                    raise
                self.runtime_state = "standby"
        return None

    def _refuse(self, reason: str) -> None:
        if reason != self.last_refusal:
            self.counters["promotions_refused"] += 1
            log.warning("refusing to campaign for leadership: %s", reason)
        self.last_refusal = reason
        self.runtime_state = "standby"

    def _handover_names_other(self) -> bool:
        raw = self.ha.read_record(self.handover_key)
        if raw is None:
            return False
        try:
            successor = json.loads(raw).get("successor")
        except (ValueError, AttributeError):
            return False
        return successor != self.address

    def _maybe_snapshot(self) -> None:
        if not (self.snapshots and self.cfg.snapshot_interval > 0):
            return
        if time.monotonic() - self._last_snapshot < self.cfg.snapshot_interval:
            return
        self._last_snapshot = time.monotonic()
        try:
            self.write_snapshot()
        except MasterError as exc:
            log.info("periodic snapshot skipped: %s", exc.message)

    def write_snapshot(self) -> dict[str, Any]:
        if self.snapshots is None:
            raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_MODE, "no --snapshot-dir configured")
        standby = self.standby
        if self.role != "standby" or standby is None:
            raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_MODE, "snapshots are taken by a standby")
        snap = standby.consistent_snapshot(self.store.read_producer_view())
        if snap is None:
            self.snapshot_counters["fail"] += 1
            raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS,
                              "no consistent point: standby not caught up with the durable prefix")
        path = self.snapshots.write(snap)
        self.snapshot_counters["success"] += 1
        trimmed = 0
        if self.cfg.trim_oplog_after_snapshot and snap.last_included_batch_id:
            trimmed = self.store.trim(snap.last_included_batch_id)
        log.info("snapshot %s: seq %d, %d objects, trimmed %d batches", path.name,
                 snap.last_included_seq, snap.object_count, trimmed)
        return {"path": str(path), "last_included_seq": snap.last_included_seq,
                "last_included_batch_id": snap.last_included_batch_id,
                "objects": snap.object_count, "trimmed_batches": trimmed}

    def promotability(self) -> dict[str, Any]:
        if self.role == "leader":
            count = self.service.key_count() if self.service else 0
            return {"promotable": False, "reason": "this master is the leader",
                    "validation": {"ok": None, "dropped_entries": None},
                    "applied_seq": self.service.writer.durable_seq if self.service else 0,
                    "primary_seq": self.service.writer.durable_seq if self.service else 0,
                    "keys_restorable": count, "state": self.runtime_state}
        standby = self.standby
        if standby is None:
            return {"promotable": False, "reason": "starting", "validation": {"ok": None,
                    "dropped_entries": None}, "applied_seq": 0, "primary_seq": 0,
                    "keys_restorable": 0, "state": self.runtime_state}
        try:
            standby.refresh_primary()
        except Exception as exc:  # noqa: BLE001
            if not is_ha_store_failure(exc):
                raise
        return self.policies.promotability.assess(standby).to_json()

    def request_promotion(self, timeout: float) -> tuple[int, dict[str, Any]]:
        """Planned handover to this standby (the rolling-upgrade step). HTTP status + body."""
        if self.role == "leader":
            return 409, {"promoted": False, "reason": "already the leader"}
        standby = self.standby
        if standby is None:
            return 503, {"promoted": False, "reason": "starting"}
        ok, reason = self.policies.promotion.may_campaign(standby, self.cfg.catch_up_timeout)
        if not ok:
            self.counters["promotions_refused"] += 1
            log.warning("promotion refused, the current leader stays: %s", reason)
            return 409, {"promoted": False, "refused": True, "reason": reason,
                         "promotable": self.policies.promotability.assess(standby).to_json()}
        view = self.election.current()
        self.ha.write_record(self.handover_key, json.dumps(
            {"successor": self.address, "from_view": view.view_version if view else 0}),
            self.cfg.handover_ttl)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.serving:
                return 200, {"promoted": True, "reason": reason, "view_version": self.view_version}
            time.sleep(0.02)
        return 504, {"promoted": False, "reason": f"not serving within {timeout:.1f}s"}

    # ------------------------------------------------------------------ leader side

    @property
    def view_version(self) -> int:
        return self.session.view_version if self.session else (
            self.leader_view.view_version if self.leader_view else 0)

    def _lead(self, session: LeaderSession) -> None:
        self.session = session
        self._lead_stop.clear()
        self.runtime_state = "leader_warmup"
        keeper = threading.Thread(target=self._keep_lease, args=(session,), name="lease-keeper",
                                  daemon=True)
        keeper.start()
        try:
            service = self._promote(session)
            if service is None:
                return
            self.service = service
            self._serving = True
            self.runtime_state = "serving"
            self.counters["promotions"] += 1
            log.info("serving as leader at %s, view_version %d, %d keys", self.address,
                     session.view_version, service.key_count())
            while not self._lead_stop.wait(min(0.1, self.cfg.poll_interval)):
                if not session.valid():
                    self._step_down(f"lease not certainly alive ({self.ha.name} unreachable or lease lost)")
                    break
                service.tick()
                if self._handover_requested(session):
                    self._step_down("planned handover to another standby")
                    break
        except Exception as exc:  # noqa: BLE001
            if not (is_ha_store_failure(exc) or isinstance(exc, Fenced)):
                raise
            log.error("leadership failed: %s", exc)
        finally:
            self._serving = False
            self._lead_stop.set()
            if self.service is not None:
                self.service.writer.stop("stepped down")
            self.service = None
            session.release()
            keeper.join(timeout=5)
            self.session = None
            self.runtime_state = "standby"

    def _promote(self, session: LeaderSession) -> MasterService | None:
        standby = self.standby
        standby.machine.fire(StandbyEvent.PROMOTE)
        if not standby.catch_up(self.cfg.catch_up_timeout):
            log.error("promotion failed: final OpLog catch-up incomplete (%s)", standby.problem)
            standby.machine.fire(StandbyEvent.PROMOTION_FAILED)
            standby.stop()
            return None
        ctx = standby.context()
        standby.machine.fire(StandbyEvent.PROMOTION_SUCCESS)
        standby.stop()
        warmup_end = time.monotonic() + self.policies.promotion.warmup_seconds
        while time.monotonic() < warmup_end:
            if self._lead_stop.wait(0.05) or not session.valid():
                return None
        index, report = self.policies.promotion.build_index(ctx, lease_ttl=self.cfg.kv_lease_ttl)
        self.last_validation = report
        self.store.claim_producer_view(session.view_version)
        prefix = self.store.read_prefix()
        writer = OpLogWriter(self.store, session.view_version, prefix, self.cfg.batch_max_entries,
                             on_fenced=lambda reason: self._lead_stop.set())
        expected = {s.info.client_id for s in index.segments.all()}
        return MasterService(index, writer, session.view_version, self.cfg.client_ttl,
                             self.cfg.write_timeout, expected_clients=expected)

    def _keep_lease(self, session: LeaderSession) -> None:
        interval = max(0.05, session.ttl / 4)
        while not self._lead_stop.wait(interval):
            if not session.keepalive() and not session.valid():
                self._lead_stop.set()
                return

    def _handover_requested(self, session: LeaderSession) -> bool:
        try:
            raw = self.ha.read_record(self.handover_key)
        except Exception as exc:  # noqa: BLE001
            if is_ha_store_failure(exc):
                return False
            raise
        if raw is None:
            return False
        try:
            req = json.loads(raw)
        except ValueError:
            return False
        return req.get("from_view") == session.view_version and req.get("successor") != self.address

    def _step_down(self, reason: str) -> None:
        log.warning("stepping down: %s", reason)
        self.counters["step_downs"] += 1
        self._serving = False
        service = self.service
        if service is not None:
            try:
                service.writer.wait_durable(service.writer.last_seq, timeout=1.0)
            except MasterError:
                pass

    # ------------------------------------------------------------------ RPC

    def _hello(self, msg: dict[str, Any], conn: Connection) -> dict[str, Any]:
        conn.client_version = str(msg.get("version", ""))
        conn.client_id = str(msg.get("client_id", ""))
        try:
            self.policies.versions.on_hello(conn.client_version, MASTER_VERSION, conn.peer, conn.client_id)
        except MasterError:
            self.counters["rejected_client_versions"] += 1
            raise
        return {"version": MASTER_VERSION, "role": self.role, "view_version": self.view_version,
                "profile": self.profile.name}

    def _handle(self, op: str, args: dict[str, Any], conn: Connection) -> Any:
        self.policies.versions.on_request(op, conn.client_version, MASTER_VERSION)
        if op == "whois":
            return {"role": self.role, "serving": self.serving, "view_version": self.view_version,
                    "leader": self.leader_view.address if self.leader_view else None}
        service, session = self.service, self.session
        if service is None or not self._serving or session is None or not session.valid():
            leader = self.leader_view.address if self.leader_view else None
            raise MasterError(ErrorCode.NOT_LEADER, f"not the serving leader; leader: {leader}")
        client_id = str(args.get("client_id") or conn.client_id)
        if op == "ping":
            return service.ping(client_id)
        if op == "mount_segment":
            return service.mount_segment(client_id, args["segment"])
        if op == "remount_segment":
            return service.remount_segment(client_id, list(args["segments"]))
        if op == "unmount_segment":
            return service.unmount_segment(client_id, str(args["endpoint"]))
        if op == "drain_segment":
            return service.drain_segment(str(args["endpoint"]))
        if op == "segment_status":
            return service.segment_status(str(args["endpoint"]))
        if op == "put_start":
            return service.put_start(client_id, _key(args), args["size"], args.get("replica_num", 1))
        if op == "put_end":
            return service.put_end(client_id, _key(args))
        if op == "put_revoke":
            return service.put_revoke(client_id, _key(args))
        if op == "get_replica_list":
            return service.get_replica_list(_key(args))
        if op == "exists":
            return service.exists(_key(args))
        if op == "remove":
            return service.remove(_key(args), bool(args.get("force", False)))
        if op == "plant_raw_entry":
            if not self.cfg.enable_fault_planting:
                raise MasterError(ErrorCode.UNAVAILABLE_IN_CURRENT_MODE,
                                  "fault planting is disabled (start with --enable-fault-planting)")
            return service.plant_raw_entry(int(args["op_type"]), _key(args), args.get("payload"))
        raise MasterError(ErrorCode.INVALID_RPC_ARGUMENTS, f"unknown op {op!r}")

    # ------------------------------------------------------------------ views (node_view.MasterView)

    @property
    def profile_name(self) -> str:
        return self.profile.name

    def replication(self) -> Replication:
        return sample_replication(self.service, self.standby, self.policies.lag)

    def key_count(self) -> int:
        if self.service is not None:
            return self.service.key_count()
        return len(self.standby.state.objects) if self.standby else 0

    def keys(self) -> list[str]:
        if self.service is not None:
            return self.service.keys()
        if self.standby is None:
            return []
        with self.standby.lock:
            return list(self.standby.state.objects)


def _key(args: dict[str, Any]) -> str:
    key = args.get("key")
    if not isinstance(key, str) or not key:
        raise MasterError(ErrorCode.INVALID_PARAMS, "key: must be a non-empty string")
    return key
