"""The one reading of mooncake_master's admin service (``--metrics_port``), by master index:
role and leader from ``/health`` (``role``, ``ha_state``, ``service_ready``), key counts and
metrics from ``/metrics``, replication progress (``ha_oplog_applied_sequence_id`` and the
primary's durable OpLog prefix in etcd), promotability and planned handover where the build has
an endpoint for them, bad entries planted in the OpLog the build keeps in etcd
(``master_cluster/oplog_planting``: MP-1, MP-2), segments and drains (MP-10) through the serving leader.

``MooncakeMasters`` is the base of the masters this family starts (``master_cluster/ha_processes``) and of
those of an existing deployment (``placements/existing_cluster``): a subclass says where each admin
service is (``admin_url``), which masters to ask (``observed``) and names the build (``build``)
and the cluster (``where``) in messages. Promotability is probed, not invented: the first call
asks for an endpoint and, when every path answers 404, raises ``TargetLacks`` naming what was
asked; a refused connection, a 5xx or an answer of the wrong shape is ``ObservationFailed`` (a
FAIL with what was seen), never n/a.
Segments go through the serving leader: ``/get_segments_detail`` (names, endpoints, status),
``/batch_query_keys`` (replica endpoints, without granting a read lease), ``POST
/api/v1/drain_jobs`` and ``/api/v1/segments/status``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pytest_mooncake.runtime.deadlines import wait_until
from pytest_mooncake.runtime.prometheus_text import parse_metrics
from pytest_mooncake.targets.base import (
    SEGMENT_END,
    Capability,
    ObservationFailed,
    PreconditionUnestablished,
    TargetError,
    TargetLacks,
    at_segment_end,
    planted_kind,
)
from pytest_mooncake.targets.mooncake.master_cluster import oplog_planting as planting
from pytest_mooncake.targets.mooncake.master_cluster.http_admin import (
    admin_get,
    admin_post,
    json_or_none,
)
from pytest_mooncake.targets.mooncake.master_cluster.oplog_planting import OPLOG_ROOT

PROMOTABILITY_PATHS = ("/ha/promotable", "/promotable", "/api/v1/ha/promotable")
PROMOTABILITY_FIELDS = ("promotable", "reason", "validation", "applied_seq", "primary_seq",
                        "keys_restorable")
HANDOVER_PATHS = ("/ha/promote", "/promote", "/api/v1/ha/promote")


def seen(status: int | None, body: str) -> str:
    """What an admin request answered, for a message."""
    return f"no answer ({body})" if status is None else f"HTTP {status}: {body[:200]!r}"


def durable_prefix(etcd: list[str], cluster_id: str | None) -> dict | None:
    """The leader's durable OpLog prefix as it stands in etcd (``{"batch_id", "last_seq"}``), or
    None when there is none yet. Without ``cluster_id`` the only ``/oplog/*/durable_prefix`` in
    that etcd is taken."""
    from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata  # noqa: PLC0415

    store = EtcdMetadata(list(etcd))
    try:
        if cluster_id:
            raw = store.get(f"{OPLOG_ROOT}{cluster_id.rstrip('/')}/durable_prefix")
        else:
            keys = [k for k in store.keys(OPLOG_ROOT) if k.endswith("/durable_prefix")]
            if len(keys) > 1:
                raise ObservationFailed("the durable OpLog prefix in etcd", (
                    f"several clusters keep an OpLog there ({', '.join(keys)}) and none was "
                    f"named"))
            raw = store.get(keys[0]) if keys else None
    finally:
        store.close()
    if raw is None:
        return None
    doc = json_or_none(raw.decode(errors="replace"))
    if not isinstance(doc, dict) or not isinstance(doc.get("last_seq"), int):
        raise ObservationFailed("the durable OpLog prefix in etcd",
                                f"unexpected value {raw[:200]!r}")
    return doc


class MooncakeMasters:
    """What a test asks of mooncake_master admin services, by master index."""

    build: str
    """The build the masters run, as messages name it."""
    where: str
    """The cluster, as messages name it (``cluster mc_123``)."""
    drain_jobs: dict[str, str]
    """Drain job ids by segment, of the drains this handle started."""
    etcd: list[str]
    """Endpoints of the etcd the masters keep their OpLog in (empty when unknown)."""
    oplog_cluster: str | None = None
    """The cluster id under ``/oplog/`` (None: the only one in that etcd)."""
    keys_final_when_serving = False
    """A release lists an object once its replica's segment is mounted on the serving master
    (``MasterClusterHandle.keys_final_when_serving``)."""
    _promotability: str | None = None

    def admin_url(self, index: int) -> str:
        """``http://host:port`` of master ``index``'s admin service, as this host reaches it."""
        raise NotImplementedError

    def observed(self) -> list[int]:
        """The masters worth asking now (those known to be running)."""
        raise NotImplementedError

    def health(self, index: int) -> dict[str, Any]:
        """/health of master ``index``; ``{"error": ...}`` when it does not answer 200 JSON (a
        master that is down is no leader and no standby)."""
        status, body = admin_get(self.admin_url(index) + "/health")
        if status != 200:
            return {"error": f"GET /health answered {seen(status, body)}"}
        try:
            return json.loads(body)
        except ValueError:
            return {"error": f"GET /health answered non-JSON: {body[:200]}"}

    def serving(self) -> list[int]:
        """Masters whose /health says service_ready (more than one would be split brain)."""
        return [i for i in self.observed() if self.health(i).get("service_ready") is True]

    def leader(self, timeout: float = 10.0) -> int:
        """Index of the serving leader (``service_ready`` in /health, i.e. past 0.3.13's
        leader warm-up of one lease TTL); waits up to ``timeout``."""
        return wait_until(self.serving, timeout, f"a serving leader in {self.where}")[0]

    def standbys(self) -> list[int]:
        return [i for i in self.observed() if self.health(i).get("role") == "standby"]

    def leader_view(self) -> dict[str, Any]:
        """``/leader`` of any live master: ``{present, leader_address, view_version}``."""
        for i in self.observed():
            status, body = admin_get(self.admin_url(i) + "/leader")
            if status == 200:
                return json.loads(body)
        return {"present": False}

    def promotable(self, index: int) -> Mapping[str, Any]:
        """The master's own promotability answer, when its admin service has an endpoint for
        it. The first call probes ``PROMOTABILITY_PATHS``: every one answering 404 is
        ``TargetLacks`` (promotability) naming them; a refused connection or a 5xx is
        ``ObservationFailed``, as is any later answer that is not a 200 JSON object with the
        predicate's fields."""
        admin = self.admin_url(index)
        if self._promotability is None:
            tried = []
            for path in PROMOTABILITY_PATHS:
                status, body = admin_get(admin + path)
                if status is None or status >= 500:
                    raise ObservationFailed(
                        f"GET {path} on master {index}'s admin service ({admin})",
                        seen(status, body))
                tried.append(f"GET {path} -> {status}")
                if status == 200:
                    self._promotability = path
                    break
            else:
                health = self.health(index)
                raise TargetLacks(Capability.PROMOTABILITY, (
                    f"mooncake_master of {self.build} exposes no promotability predicate "
                    f"({'; '.join(tried)}); its /health reports only "
                    f"ha_state={health.get('ha_state')!r}, role={health.get('role')!r}"))
        status, body = admin_get(admin + self._promotability)
        doc = json_or_none(body) if status == 200 else None
        if not isinstance(doc, dict) or "promotable" not in doc:
            raise ObservationFailed(
                f"GET {self._promotability} on master {index} ({admin}), the promotability "
                f"predicate", seen(status, body) if status != 200 else
                f"an answer without the field 'promotable': {body[:200]!r}")
        return doc

    def replication(self, index: int) -> dict[str, Any]:
        """Where master ``index`` stands in the OpLog, from outside: ``applied_seq``
        (``ha_oplog_applied_sequence_id`` of its /metrics), ``primary_seq`` (``last_seq`` of
        the leader's durable OpLog prefix in etcd; 0 before the first write), ``lag``
        (``ha_oplog_standby_lag``), ``state`` (``ha_standby_state``, a number) and ``role``
        (of /health)."""
        metrics = self.metrics(index)
        health = self.health(index)
        prefix = durable_prefix(self.etcd, self.oplog_cluster) if self.etcd else None
        applied = metrics.get("ha_oplog_applied_sequence_id")
        if applied is None:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"mooncake_master of {self.build} reports no ha_oplog_applied_sequence_id in "
                f"its /metrics (master {index}); its replication progress cannot be seen"))
        return {"applied_seq": int(applied),
                "primary_seq": int(prefix["last_seq"]) if prefix else 0,
                "lag": metrics.get("ha_oplog_standby_lag"),
                "state": metrics.get("ha_standby_state"),
                "role": health.get("role")}

    def _require_serving(self, index: int, what: str) -> None:
        """0.3.13 counts and lists keys only on the serving leader: a standby's /metrics says
        master_key_count 0 whatever it applied, and its /get_all_keys answers 503."""
        health = self.health(index)
        if health.get("service_ready") is True:
            return
        applied = self.metrics(index).get("ha_oplog_applied_sequence_id")
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"mooncake_master of {self.build} exposes no {what} on a master that is "
            f"not serving (master {index}: role={health.get('role')!r}, "
            f"ha_state={health.get('ha_state')!r}): its /metrics master_key_count counts only "
            f"served keys (ha_oplog_applied_sequence_id={applied}) and /get_all_keys answers 503 "
            f"'service plane is not active'"))

    def key_count(self, index: int) -> int:
        """Keys of the serving master ``index`` (``master_key_count``); TargetLacks for a standby."""
        self._require_serving(index, "key count")
        return int(self.metrics(index).get("master_key_count", 0))

    def keys(self, index: int) -> list[str]:
        """Keys of the serving master ``index`` (``GET /get_all_keys``, one per line)."""
        self._require_serving(index, "key list")
        status, body = admin_get(self.admin_url(index) + "/get_all_keys", timeout=10.0)
        if status != 200:
            raise ObservationFailed(f"GET /get_all_keys of the serving master {index}",
                                    seen(status, body))
        return [line.strip() for line in body.splitlines() if line.strip()]

    def promote(self, index: int, timeout: float = 15.0) -> tuple[int, Any]:
        """A planned handover to standby ``index`` through its admin service, where it has an
        endpoint for one: ``HANDOVER_PATHS`` are POSTed in turn until one is there; every one
        answering 404 or 405 is ``TargetLacks`` naming them (leadership then moves only when
        the leader's etcd lease lapses); no answer or a 5xx is ``ObservationFailed``."""
        admin = self.admin_url(index)
        tried = []
        for path in HANDOVER_PATHS:
            status, body = admin_post(admin + path, {"timeout": timeout}, timeout=timeout + 10)
            if status is None or status >= 500:
                raise ObservationFailed(f"POST {path} on master {index}'s admin service ({admin})",
                                        seen(status, body))
            if status not in (404, 405):
                doc = json_or_none(body)
                return status, doc if isinstance(doc, dict) else {"body": body[:200]}
            tried.append(f"POST {path} -> {status}")
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"mooncake_master of {self.build} has no planned-handover endpoint "
            f"({'; '.join(tried)}): leadership moves only when the leader's etcd lease lapses"))

    def snapshot(self, index: int) -> Any:
        raise TargetLacks(Capability.MASTER_SNAPSHOT, (
            f"mooncake_master of {self.build} has no endpoint to write a snapshot "
            f"on request"))

    def plant_bad_descriptor(self, victim_key: str, key: str = "planted-bad-descriptor",
                             kind: str = "overlap") -> int:
        """Append to the OpLog the masters keep in etcd (``master_cluster/oplog_planting``) a PUT_END of ``key``
        made from ``victim_key``'s own last PUT_END payload: its buffer address moved half its
        size up (``kind`` "overlap"), its segment's endpoint swapped for one nobody mounted
        ("unknown_segment"), cut in half so it no longer decodes ("malformed"), or two replicas
        ("overlap_beside_valid", "unknown_segment_beside_valid"): a valid one on memory a spare
        object held (put through store client 0 and removed again, both logged before the
        planted entry) and the overlapping one, or the victim's on a segment nobody mounted, or
        ("overlap_on_every_replica") both over the victim's memory, or the victim's replica
        moved by its segment's end (``SEGMENT_END``: across it, past it, or ending at it; the
        end from ``/get_segments_detail``'s base_address and size_bytes), or ("zero_size")
        its size and its replica's length set to 0.
        The leader's index is not touched; a standby replays the entry.
        Returns its sequence id; ``TargetLacks`` with what the probe of the etcd keys found
        where the build keeps no such OpLog or no entry for the victim."""
        planted_kind(kind)
        with self._plantable_oplog() as oplog:
            puts = [e for b in oplog.batches() for e in b.entries
                    if e.op_type == planting.PUT_END and e.key == victim_key]
            if not puts:
                raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
                    f"mooncake_master of {self.build} ({self.where}) logged no PUT_END for "
                    f"{victim_key!r} in {oplog.root}batches/: no descriptor of it to plant from"))
            payload = (self._beside_valid(victim_key, puts[-1].payload, f"{key}-spare", oplog,
                                          elsewhere=kind == "unknown_segment_beside_valid",
                                          every=kind == "overlap_on_every_replica")
                       if kind.endswith("_beside_valid") or kind == "overlap_on_every_replica"
                       else self._bad_payload(victim_key, puts[-1].payload, kind))
            return oplog.append([planting.OpLogEntry(planting.PUT_END, puts[-1].tenant, key,
                                                     payload)])

    @contextmanager
    def _plantable_oplog(self) -> Iterator[planting.OpLogInEtcd]:
        """The OpLog the masters keep in etcd, once probed plantable (``unplantable``: what the
        probe found is the ``TargetLacks`` reason); closed on leaving."""
        if not self.etcd or not self.oplog_cluster:
            raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
                f"{self.where}: the etcd its masters keep their OpLog in is not known to this "
                f"handle, so nothing can be planted in it"))
        oplog = planting.OpLogInEtcd(self.etcd, self.oplog_cluster)
        try:
            why = oplog.unplantable()
            if why:
                raise TargetLacks(Capability.MASTER_FAULT_PLANTING,
                                  f"mooncake_master of {self.build} ({self.where}): {why}")
            yield oplog
        finally:
            oplog.close()

    def plant_removal(self, key: str) -> int:
        """Append to the OpLog in etcd a REMOVE of ``key``, a copy of the last REMOVE the build
        itself logged with only the key changed; the leader's index keeps ``key``, a standby
        replays the removal. Used where the leader cannot be asked: after a planted entry,
        0.3.13.post1's leader answers its own OpLog writes with ETCD_TRANSACTION_FAIL (rc=-1002),
        its prefix moved by the planter. Returns its sequence id; ``TargetLacks`` where the
        build logged no REMOVE to model one on."""
        with self._plantable_oplog() as oplog:
            removes = [e for b in oplog.batches() for e in b.entries
                       if e.op_type == planting.REMOVE]
            if not removes:
                raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
                    f"mooncake_master of {self.build} ({self.where}) logged no REMOVE (op "
                    f"{planting.REMOVE}) in {oplog.root}batches/ to model a planted one on"))
            return oplog.append([planting.OpLogEntry(planting.REMOVE, removes[-1].tenant, key,
                                                     removes[-1].payload)])

    def _bad_payload(self, victim_key: str, payload: bytes, kind: str) -> bytes:
        """The victim's metadata made invalid as ``kind`` says, located through the replica the
        serving leader reports for it."""
        if kind == "malformed":
            return payload[: len(payload) // 2]
        replica = self._replicas(victim_key)[:1]
        if kind == "overlap":
            address, size = self._memory_of(victim_key, replica)
            moved, _ = planting.shifted_descriptor(payload, address, size)
            return moved
        if kind in SEGMENT_END or kind == "zero_size":
            address, size = self._memory_of(victim_key, replica)
            try:
                if kind == "zero_size":
                    return planting.zero_sized(payload, address)[0]
                end = self._segment_end(victim_key, replica)
                moved, _ = planting.replica_moved(payload, address,
                                                  at_segment_end(kind, end, size))
            except planting.UndecodablePayload as exc:
                # our codec's gap, not a means the build lacks: nothing judged (error, never n/a)
                raise PreconditionUnestablished(
                    f"the planter cannot re-encode the object metadata mooncake_master of "
                    f"{self.build} ({self.where}) logged: {exc}") from None
            return moved
        endpoint, mounted = self._segment_of(victim_key, replica)
        try:
            moved, _ = planting.moved_to_unmounted_segment(payload, endpoint, mounted)
        except ValueError as exc:
            raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
                f"mooncake_master of {self.build}: {exc}, so the planter cannot tell where its "
                f"segment is said")) from None
        return moved

    def _segment_of(self, key: str, replica: list[dict[str, Any]]) -> tuple[str, set[str]]:
        """The segment endpoint of the replica the serving leader reports for ``key``, and the
        endpoints of every mounted segment."""
        endpoint = replica[0].get("transport_endpoint_") if replica else None
        if not isinstance(endpoint, str):
            raise ObservationFailed(f"the replica of {key!r} the serving leader reports",
                                    f"no transport_endpoint_ in {replica}")
        return endpoint, {str(s.get("te_endpoint")) for s in self.segments_detail()}

    def _segment_end(self, key: str, replica: list[dict[str, Any]]) -> int:
        """Where the segment holding ``key``'s replica ends (exclusive): its ``base_address``
        plus ``size_bytes`` as ``/get_segments_detail`` reports them. ``TargetLacks`` with the
        entry where the build's answer says neither."""
        endpoint, _ = self._segment_of(key, replica)
        entry = next((s for s in self.segments_detail() if s.get("te_endpoint") == endpoint), None)
        if entry is None:
            raise ObservationFailed(f"the segment of {key!r}'s replica in /get_segments_detail",
                                    f"no entry has te_endpoint {endpoint!r}")
        base, size = entry.get("base_address"), entry.get("size_bytes")
        try:
            base = int(base, 16) if isinstance(base, str) else base
        except ValueError:
            base = None
        if not isinstance(base, int) or not isinstance(size, int) or size <= 0:
            raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
                f"mooncake_master of {self.build} ({self.where}) says no base address and size "
                f"of the segment {endpoint} in /get_segments_detail ({entry}), so the planter "
                f"cannot tell where it ends"))
        return base + size

    def _memory_of(self, key: str, replica: list[dict[str, Any]]) -> tuple[int, int]:
        """(buffer address, size) of the replica the serving leader reports for ``key``."""
        if not replica or not isinstance(replica[0].get("buffer_address_"), int):
            raise ObservationFailed(f"the replica of {key!r} the serving leader reports",
                                    f"no buffer_address_ in {replica}")
        return replica[0]["buffer_address_"], int(replica[0].get("size_", 1))

    def _beside_valid(self, victim_key: str, payload: bytes, spare: str,
                      oplog: planting.OpLogInEtcd, elsewhere: bool = False,
                      every: bool = False) -> bytes:
        """Two replicas from PUT_END payloads the build wrote: the ``spare`` object's, put
        through store client 0 and removed again (its memory then held by nothing), and the
        victim's own with its address moved half its size up, or (``elsewhere``) on a segment
        endpoint nobody mounted (``planting.beside_valid``); ``every``: the spare's replica
        moved onto the victim's memory too (``planting.every_replica_overlapping``)."""
        replica = self._replicas(victim_key)[:1]
        address, size = self._memory_of(victim_key, replica)
        unmounted = None
        if elsewhere:
            endpoint, mounted = self._segment_of(victim_key, replica)
            unmounted = planting.unmounted_endpoint(endpoint, mounted)
        client = self.client(0)
        put = client.put(spare, size)
        if not put["ok"]:
            raise ObservationFailed(f"the put of the planter's spare object {spare!r} through "
                                    f"the healthy leader", str(put))
        logged: list[bytes] = []

        def spare_logged() -> bool:
            logged[:] = [e.payload for b in oplog.batches() for e in b.entries
                         if e.op_type == planting.PUT_END and e.key == spare]
            return bool(logged)

        wait_until(spare_logged, planting.APPEND_TIMEOUT,
                   f"the leader to log the PUT_END of the spare object {spare!r} in "
                   f"{oplog.root}batches/")
        removed = client.remove(spare, force=True)
        if not removed["ok"]:
            raise ObservationFailed(f"the forced remove of the planter's spare object {spare!r} "
                                    f"through the healthy leader", str(removed))
        try:
            planted, _ = (planting.every_replica_overlapping(payload, logged[-1], address, size)
                          if every else
                          planting.beside_valid(payload, logged[-1], address, size, unmounted))
        except planting.UndecodablePayload as exc:
            # our codec's gap, not a means the build lacks: nothing judged (error, never n/a)
            raise PreconditionUnestablished(
                f"the planter cannot re-encode the object metadata mooncake_master of "
                f"{self.build} ({self.where}) logged: {exc}") from None
        return planted

    def metrics(self, index: int) -> Mapping[str, float]:
        status, body = admin_get(self.admin_url(index) + "/metrics", timeout=5.0)
        if status != 200:
            raise ObservationFailed(f"GET /metrics of master {index} ({self.admin_url(index)})",
                                    seen(status, body))
        return parse_metrics(body)

    def _leader_admin(self) -> str:
        return self.admin_url(self.leader())

    def _endpoint_exists(self, status: int | None, doc: Any, request: str) -> None:
        """A 404 without the admin service's JSON error is an endpoint this build lacks (older
        builds have no drain jobs): the test is n/a, naming the request."""
        if status == 404 and not (isinstance(doc, dict) and "error_message" in doc):
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"mooncake_master of {self.build} has no {request} admin endpoint "
                f"(404)"))

    def segments_detail(self) -> list[dict[str, Any]]:
        """The serving leader's ``/get_segments_detail`` entries (segment_name, te_endpoint,
        status, allocator bytes, ...)."""
        status, body = admin_get(self._leader_admin() + "/get_segments_detail", timeout=5.0)
        doc = json_or_none(body)
        self._endpoint_exists(status, doc, "GET /get_segments_detail")
        if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
            raise TargetError(f"GET /get_segments_detail answered {status}: {body[:200]}")
        return [s for s in doc["segments"] if isinstance(s, dict)]

    def _replicas(self, key: str) -> list[dict[str, Any]]:
        """The serving leader's replica records of ``key`` (``transport_endpoint_``,
        ``buffer_address_``, ``size_``, ...; none when it is absent or not yet readable).
        ``/batch_query_keys`` reads them without a read lease (a lease would hold the object
        back from a drain); a key with a comma cannot be said in its ``keys=`` list, so it goes
        through ``/query_key``, which grants one."""
        admin = self._leader_admin()
        if "," in key:
            status, body = admin_get(admin + "/query_key?key=" + urllib.parse.quote(key))
            doc = json_or_none(body)
            if status == 404:
                return []
            if status != 200 or not isinstance(doc, dict):
                raise TargetError(f"GET /query_key for {key!r} answered {status}: {body[:200]}")
            replicas = doc.get("data") or []
        else:
            status, body = admin_get(admin + "/batch_query_keys?keys=" + urllib.parse.quote(key))
            doc = json_or_none(body)
            self._endpoint_exists(status, doc, "GET /batch_query_keys")
            item = doc.get("data", {}).get(key) if isinstance(doc, dict) else None
            if status != 200 or not isinstance(item, dict):
                raise TargetError(f"GET /batch_query_keys for {key!r} answered {status}: "
                                  f"{body[:200]}")
            if not item.get("ok"):
                return []
            replicas = (item.get("values") or []) + (item.get("nof_values") or [])
        return [r for r in replicas if isinstance(r, dict)]

    def replica_segments(self, key: str) -> list[str]:
        """Segments holding a readable replica of ``key`` (none when it is absent or not yet
        readable)."""
        endpoints = [r.get("transport_endpoint_") for r in self._replicas(key)]
        by_endpoint = {s.get("te_endpoint"): s.get("segment_name") for s in self.segments_detail()}
        return [by_endpoint.get(e) or e for e in endpoints if e]

    def replica_descriptors(self, key: str) -> list[list[tuple[str, int, int]]]:
        """``key``'s readable replicas as the serving leader reports them (``_replicas``): per
        replica its buffer ``(segment, buffer_address_, size_)``, the segment named as
        ``replica_segments`` names it. ``TargetLacks`` where a replica record names its
        endpoint but no integer buffer address or size (what the build answered is the reason);
        ``ObservationFailed`` for a record of no such shape at all."""
        replicas = self._replicas(key)
        by_endpoint = ({s.get("te_endpoint"): s.get("segment_name") for s in self.segments_detail()}
                       if replicas else {})
        out = []
        for r in replicas:
            endpoint = r.get("transport_endpoint_")
            if not isinstance(endpoint, str):
                raise ObservationFailed(f"the replicas of {key!r} the serving leader reports",
                                        f"a record without transport_endpoint_: {r}")
            address, size = r.get("buffer_address_"), r.get("size_")
            if not isinstance(address, int) or not isinstance(size, int):
                raise TargetLacks(Capability.MASTER_CLUSTER, (
                    f"mooncake_master of {self.build} reports {key!r}'s replica on {endpoint} "
                    f"without an integer buffer_address_ and size_ ({r}): the memory a replica "
                    f"lies in cannot be read"))
            out.append([(by_endpoint.get(endpoint) or endpoint, address, size)])
        return out

    def drain_segment(self, segment: str) -> None:
        """Start a drain job for ``segment`` (targets chosen by the master). A refusal is the
        master's answer and is raised with its error name."""
        status, body = admin_post(self._leader_admin() + "/api/v1/drain_jobs",
                                  {"segments": [segment]})
        doc = json_or_none(body)
        self._endpoint_exists(status, doc, "POST /api/v1/drain_jobs")
        if status != 200 or not isinstance(doc, dict) or not doc.get("success"):
            raise TargetError(f"mooncake_master refused to drain {segment}: POST "
                              f"/api/v1/drain_jobs answered {status}: {body[:200]}")
        self.drain_jobs[segment] = str(doc.get("job_id"))

    def drain_job(self, segment: str) -> dict[str, Any]:
        """The master's record of the drain job started for ``segment``."""
        job = self.drain_jobs[segment]
        status, body = admin_get(self._leader_admin() + "/api/v1/drain_jobs/query?job_id="
                                 + urllib.parse.quote(job))
        doc = json_or_none(body)
        return doc if status == 200 and isinstance(doc, dict) else {
            "error": f"{status}: {body[:200]}"}

    def segment_status(self, segment: str) -> str | None:
        """``status_name`` from ``/api/v1/segments/status`` (OK, DRAINING, DRAINED,
        GRACEFULLY_UNMOUNTING, UNMOUNTING); None once the master answers SEGMENT_NOT_FOUND."""
        status, body = admin_get(self._leader_admin() + "/api/v1/segments/status?segment="
                                 + urllib.parse.quote(segment))
        doc = json_or_none(body)
        self._endpoint_exists(status, doc, "GET /api/v1/segments/status")
        if status == 404 and isinstance(doc, dict) and doc.get("error_message") == \
                "SEGMENT_NOT_FOUND":
            return None
        if status != 200 or not isinstance(doc, dict) or not doc.get("status_name"):
            raise TargetError(f"GET /api/v1/segments/status for {segment} answered {status}: "
                              f"{body[:200]}")
        return str(doc["status_name"])
