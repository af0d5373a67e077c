"""The one reading of mooncake_master's admin service (``--metrics_port``), by master index:
role and leader from ``/health`` (``role``, ``ha_state``, ``service_ready``), key counts and
metrics from ``/metrics``, promotability where the build has an endpoint for it, segments and
drains (MP-10) through the serving leader.

``MooncakeMasters`` is the base of the masters this family starts (``master_processes``) and of
those of an existing deployment (``deployment_placement``): a subclass says where each admin
service is (``admin_url``), which masters to ask (``observed``) and names the build (``build``)
and the cluster (``where``) in messages. Promotability is probed, not invented: the first call
asks for an endpoint and, when none answers, raises ``TargetLacks`` naming what was asked.
Segments go through the serving leader: ``/get_segments_detail`` (names, endpoints, status),
``/batch_query_keys`` (replica endpoints, without granting a read lease), ``POST
/api/v1/drain_jobs`` and ``/api/v1/segments/status``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.runtime.deadlines import wait_until
from pytest_mooncake.runtime.prometheus_text import parse_metrics
from pytest_mooncake.targets.base import Capability, TargetError, TargetLacks
from pytest_mooncake.targets.mooncake.admin_http import admin_get, admin_post, json_or_none

PROMOTABILITY_PATHS = ("/ha/promotable", "/promotable", "/api/v1/ha/promotable")


class MooncakeMasters:
    """What a test asks of mooncake_master admin services, by master index."""

    build: str
    """The build the masters run, as messages name it."""
    where: str
    """The cluster, as messages name it (``cluster mc_123``)."""
    drain_jobs: dict[str, str]
    """Drain job ids by segment, of the drains this handle started."""

    def admin_url(self, index: int) -> str:
        """``http://host:port`` of master ``index``'s admin service, as this host reaches it."""
        raise NotImplementedError

    def observed(self) -> list[int]:
        """The masters worth asking now (those known to be running)."""
        raise NotImplementedError

    def health(self, index: int) -> dict[str, Any]:
        status, body = admin_get(self.admin_url(index) + "/health")
        if status != 200:
            return {"error": f"GET /health answered {status}: {body[:200]}"}
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
        it; otherwise ``TargetLacks`` naming the paths that were asked."""
        admin = self.admin_url(index)
        if getattr(self, "_promotability", None) is None:
            tried = []
            for path in PROMOTABILITY_PATHS:
                status, body = admin_get(admin + path)
                tried.append(f"GET {path} -> {status}")
                if status == 200:
                    self._promotability = path
                    break
            else:
                health = self.health(index)
                raise TargetLacks(Capability.MASTER_CLUSTER, (
                    f"mooncake_master of {self.build} exposes no promotability "
                    f"endpoint ({'; '.join(tried)}); its /health reports only "
                    f"ha_state={health.get('ha_state')!r}"))
        status, body = admin_get(admin + self._promotability)
        return json.loads(body) if status == 200 else {"error": f"{status}: {body[:200]}"}

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
            raise TargetError(f"GET /get_all_keys of master {index} answered {status}: "
                              f"{body[:200]}")
        return [line.strip() for line in body.splitlines() if line.strip()]

    def promote(self, index: int, timeout: float = 15.0) -> Any:
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"mooncake_master of {self.build} has no planned-handover endpoint "
            f"(leadership moves only when the leader's etcd lease lapses)"))

    def snapshot(self, index: int) -> Any:
        raise TargetLacks(Capability.MASTER_SNAPSHOT, (
            f"mooncake_master of {self.build} has no endpoint to write a snapshot "
            f"on request"))

    def plant_bad_descriptor(self, victim_key: str, key: str = "planted-bad-descriptor") -> int:
        raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
            f"mooncake_master of {self.build} has no means to plant an entry in a "
            f"standby's replicated state"))

    def metrics(self, index: int) -> Mapping[str, float]:
        status, body = admin_get(self.admin_url(index) + "/metrics", timeout=5.0)
        if status != 200:
            raise TargetError(f"GET /metrics of master {index} answered {status}: {body[:200]}")
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

    def replica_segments(self, key: str) -> list[str]:
        """Segments holding a readable replica of ``key`` (none when it is absent or not yet
        readable). ``/batch_query_keys`` reads replicas without a read lease (a lease would hold
        the object back from a drain); a key with a comma cannot be said in its ``keys=`` list,
        so it goes through ``/query_key``, which grants one."""
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
        endpoints = [r.get("transport_endpoint_") for r in replicas if isinstance(r, dict)]
        by_endpoint = {s.get("te_endpoint"): s.get("segment_name") for s in self.segments_detail()}
        return [by_endpoint.get(e) or e for e in endpoints if e]

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
