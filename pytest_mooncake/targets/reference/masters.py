"""The reference target's master cluster: ``python -m reference_engine master`` processes (and
``client`` processes) on a real etcd, driven through their admin and control HTTP ports.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.cpu_starvation import STRETCH_CAP, StarvedDeadline
from pytest_mooncake.runtime.deadlines import TRANSIENT, wait_until
from pytest_mooncake.runtime.loopback_http import http_request, json_body
from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import ManagedProcess, ProcessStartError, http_ok
from pytest_mooncake.runtime.prometheus_text import parse_metrics
from pytest_mooncake.targets.base import (
    SEGMENT_END,
    MasterEndpoint,
    ObservationFailed,
    PreconditionUnestablished,
    TargetError,
    at_segment_end,
    planted_kind,
)
from pytest_mooncake.targets.mooncake.store_clients import PROTOCOL as MOONCAKE_PROTOCOL
from pytest_mooncake.targets.process_masters import ProcessMasters
from pytest_mooncake.targets.reference.process_env import reference_env
from pytest_mooncake.targets.reference.wire_listeners import CoroListeners

PLANT_OP_PUT_END = 1
PLANT_OP_REMOVE = 3
STARTING_STATES = (None, "STOPPED", "CONNECTING", "SYNCING", "standby", "starting")
"""What ``/ha/promotable`` says as ``state`` while a standby master has no baseline yet
(``reference_engine.master.standby_state``; "standby"/"starting" before its standby exists)."""


def _http(method: str, url: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any]:
    answer = http_request(method, url, json_body(body), timeout=timeout)
    if "json" in answer.content_type:
        return answer.status, json.loads(answer.body or b"null")
    return answer.status, answer.text


def _endpoints(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    endpoints = [e.strip() for e in (spec.split(",") if isinstance(spec, str) else spec) if e.strip()]
    if not endpoints:
        raise TargetError("master etcd override: no endpoints given")
    return endpoints


ATTACH_WAIT = 10.0
"""Seconds (in which the masters and the harness could run) an operator client may take to
attach to the leader."""


def put_keys(client: Any, n: int, prefix: str = "k", size: int = 64) -> list[str]:
    """Put ``n`` objects ``prefix0..`` through a store client, each acknowledged; their keys."""
    keys = [f"{prefix}{i}" for i in range(n)]
    for key in keys:
        result = client.put(key, size)
        assert result["ok"], f"put {key}: {result}"
    return keys


@dataclass
class _Master:
    index: int
    rpc_port: int
    admin_port: int
    process: ManagedProcess
    etcd: list[str] | None = None
    """This master's own etcd endpoints (e.g. through a fault proxy); None = the cluster's."""
    redis: str | None = None
    """Likewise its own Redis address, for a cluster on Redis HA."""

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.rpc_port}"


@dataclass
class ClientProcess:
    """One ``python -m reference_engine client`` process, driven over its control port."""

    index: int
    client_id: str
    control_port: int
    process: ManagedProcess
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    def status(self) -> dict[str, Any]:
        return _http("GET", self.url + "/status")[1]

    def _op(self, op: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        started = time.time()
        _, result = _http("POST", f"{self.url}/{op}", body, timeout=timeout)
        self.history.append({"op": op, "body": body, "start": started, "end": time.time(),
                             "result": result})
        return result

    def put(self, key: str, size: int = 64) -> dict[str, Any]:
        """``{"ok": True, "result": {...sequence_id, view_version}}`` or ``{"ok": False, "error"}``."""
        return self._op("put", {"key": key, "size": size})

    def get(self, key: str) -> dict[str, Any]:
        return self._op("get", {"key": key})

    def exists(self, key: str) -> dict[str, Any]:
        return self._op("exists", {"key": key})

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        return self._op("remove", {"key": key, "force": force})

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        """SIGTERM (then SIGKILL after the process's stop timeout); frees the control port."""
        self.process.terminate()
        release_port(self.control_port)

    def alive(self) -> bool:
        return self.process.alive()


PROTOCOL = "reference-json-rpc"
"""``Target.master_protocol`` of the reference target: length-prefixed JSON over TCP, opened by
a version handshake (``reference_engine.master.protocol``)."""


def ha_location_args(etcd: list[str] | tuple[str, ...], redis: str | None) -> list[str]:
    """The ``--etcd``/``--redis`` arguments of a reference master or client process."""
    return ["--redis", redis] if redis else ["--etcd", ",".join(etcd)]


def start_client_process(etcd: list[str], cluster_id: str, workdir: Path, index: int,
                         client_id: str, profile: str, version: str | None = None,
                         reattach_timeout: float = 3.0, heartbeat_interval: float = 0.1,
                         stall: float = 121.0, wait_attached: bool = True,
                         timeout: float = 15.0, redis: str | None = None) -> ClientProcess:
    """One ``python -m reference_engine client`` process of ``profile`` on the cluster
    ``cluster_id`` of ``etcd`` (or of ``redis``, a cluster on Redis HA), announcing ``version``
    (default: the reference's own)."""
    port = free_port()
    argv = [sys.executable, "-m", "reference_engine", "client", *ha_location_args(etcd, redis),
            "--cluster-id", cluster_id, "--client-id", client_id,
            "--control", f"127.0.0.1:{port}", "--profile", profile,
            "--reattach-timeout", str(reattach_timeout),
            "--heartbeat-interval", str(heartbeat_interval), "--stall", str(stall)]
    if version:
        argv += ["--version", version]
    proc = ManagedProcess(f"client-{client_id}", argv, Path(workdir) / f"client-{client_id}.log",
                          env=reference_env(), ready=http_ok(f"http://127.0.0.1:{port}/status"),
                          ready_timeout=30.0)
    handle = ClientProcess(index, client_id, port, proc)
    try:
        proc.start()
    except ProcessStartError as exc:
        release_port(port)
        raise TargetError(str(exc)) from None
    if wait_attached:
        try:
            wait_until(lambda: handle.status()["attached"], timeout,
                       f"client {client_id} attached", ignore=TRANSIENT)
        except TimeoutError:
            handle.stop()
            raise
    return handle


def _freed_range(client: Any, spare: str, size: int) -> list:
    """A descriptor of ``size`` bytes of mounted memory no object holds: a spare object's,
    put and removed again through the leader (both logged before the planted entry)."""
    client.put(spare, size)
    freed = client.get(spare)["replicas"][0]["descriptors"][0]
    client.remove(spare, force=True)
    return list(freed)


class ReferenceMasterCluster(CoroListeners, ProcessMasters):
    """N reference masters and M store-client processes of one profile on one etcd, or on one
    Redis (``redis="host:port"``: leader hash and OpLog in Redis, ``--mc-ha=redis``); each
    master also answers mooncake_master's RPC on a listener of its own (``wire_listeners``).

    Options: ``profile`` (rfc/legacy), ``lease_ttl`` (s, etcd minimum 2), ``poll_interval``,
    ``client_ttl``, ``partial_restore``, ``snapshots`` (a shared snapshot dir),
    ``trim_oplog_after_snapshot``, ``fault_planting`` (default True), ``warmup`` (legacy
    leader warm-up), ``client_stall`` (legacy reattach stall), ``reattach_timeout``,
    ``heartbeat_interval``, ``catch_up_timeout``, ``write_timeout``, ``master_etcd``
    (``{index: "host:port" or [endpoints]}``: the etcd endpoints those masters use instead of
    the cluster's, e.g. an ``mc_faults`` proxy to cut one master's etcd traffic; clients and
    the other masters keep talking to etcd directly), ``master_redis`` (the same for a cluster
    on Redis), ``start`` (default True: start the masters and wait for a leader).
    """

    keys_final_when_serving = True
    """A reference master restores before it says it serves, and a client mounting its
    segment again adds no object (``MasterService.remount_segment``)."""

    def __init__(self, etcd_endpoints: list[str], workdir: Path, profile: str = "rfc",
                 masters: int = 2, clients: int = 0, redis: str | None = None, **options: Any):
        self.etcd = list(etcd_endpoints)
        self.redis = redis
        """``host:port`` of the Redis the masters keep their HA state in; None = etcd."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.profile = options.pop("profile", profile)
        self.cluster_id = options.pop("cluster_id", f"mc-{uuid.uuid4().hex[:10]}")
        self.lease_ttl = int(options.pop("lease_ttl", 2))
        self.poll_interval = float(options.pop("poll_interval", 0.05))
        self.client_ttl = float(options.pop("client_ttl", 10.0))
        self.partial_restore = bool(options.pop("partial_restore", False))
        snapshots = options.pop("snapshots", False)
        self.snapshot_dir = (self.workdir / "snapshots") if snapshots is True else (
            Path(snapshots) if snapshots else None)
        self.trim_oplog = bool(options.pop("trim_oplog_after_snapshot", False))
        self.fault_planting = bool(options.pop("fault_planting", True))
        self.warmup = options.pop("warmup", None)
        self.client_stall = float(options.pop("client_stall", 121.0))
        self.reattach_timeout = float(options.pop("reattach_timeout", 3.0))
        self.heartbeat_interval = float(options.pop("heartbeat_interval", 0.1))
        self.catch_up_timeout = float(options.pop("catch_up_timeout", 5.0))
        self.write_timeout = float(options.pop("write_timeout", 5.0))
        self.extra_master_args = list(options.pop("master_args", ()))
        self.master_etcd = {int(i): _endpoints(e)
                            for i, e in dict(options.pop("master_etcd", None) or {}).items()}
        self.master_redis = {int(i): str(a)
                             for i, a in dict(options.pop("master_redis", None) or {}).items()}
        if (self.master_etcd and redis) or (self.master_redis and not redis):
            raise TargetError(
                "reference master cluster: per-master routing must name the cluster's HA store "
                f"(the cluster is on {'Redis' if redis else 'etcd'}; use "
                f"{'master_redis' if redis else 'master_etcd'})")
        start = options.pop("start", True)
        if options:
            raise TargetError(f"reference master cluster: unknown options {sorted(options)}")
        self.masters: list[_Master] = []
        self.clients: list[ClientProcess] = []
        self._library_clients: list[Any] = []
        self._allocating = threading.Lock()
        if start:
            try:
                self._start_all(masters, clients)
            except BaseException:
                self.close()
                raise

    def _start_all(self, masters: int, clients: int) -> None:
        """Master 0 first, serving as leader; then the other masters (standbys) side by side,
        each waited for until it follows the OpLog; then the store clients side by side. A
        standby must follow before any client writes, even its segment's mount: a legacy
        standby starts from the OpLog's end, and one that missed the mount refuses to restore
        the objects on that segment."""
        if masters:
            self.start_master()
            self.leader(timeout=30.0)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, masters - 1),
                                                   thread_name_prefix="mc-masters") as pool:
            standbys = [pool.submit(self.start_master) for _ in range(masters - 1)]
            for future in standbys:
                self.wait_following(future.result())
        started = [self.start_client(wait_attached=False) for _ in range(clients)]
        for handle in started:
            self.wait_attached(handle)
        if masters:
            self.leader(timeout=30.0)

    def wait_following(self, index: int, timeout: float = 30.0) -> None:
        """Wait until standby ``index`` has its baseline and follows the OpLog (its standby
        state is past CONNECTING/SYNCING): a write acknowledged from then on reaches it also
        under the legacy profile, whose fresh standby starts from the OpLog's end. (Started
        one after another, a standby used to get there while the store clients started.)"""
        wait_until(lambda: self.promotable(index).get("state") not in STARTING_STATES, timeout,
                   f"standby master {index} to follow the OpLog", ignore=TRANSIENT)

    # ------------------------------------------------------------------ masters

    def _master_argv(self, m: _Master, **overrides: Any) -> list[str]:
        argv = [sys.executable, "-m", "reference_engine", "master",
                *ha_location_args(m.etcd or self.etcd, (m.redis or self.redis) if self.redis
                                  else None),
                "--cluster-id", self.cluster_id,
                "--rpc", f"127.0.0.1:{m.rpc_port}", "--admin", f"127.0.0.1:{m.admin_port}",
                "--profile", overrides.get("profile", self.profile),
                "--lease-ttl", str(self.lease_ttl), "--poll-interval", str(self.poll_interval),
                "--client-ttl", str(self.client_ttl), "--catch-up-timeout", str(self.catch_up_timeout),
                "--write-timeout", str(self.write_timeout)]
        if overrides.get("partial_restore", self.partial_restore):
            argv.append("--partial-restore")
        if self.snapshot_dir is not None:
            argv += ["--snapshot-dir", str(self.snapshot_dir)]
        if self.trim_oplog:
            argv.append("--trim-oplog-after-snapshot")
        if self.fault_planting:
            argv.append("--enable-fault-planting")
        if self.warmup is not None:
            argv += ["--warmup", str(self.warmup)]
        return argv + self.extra_master_args + list(overrides.get("args", ()))

    def start_master(self, index: int | None = None, etcd: str | list[str] | None = None,
                     redis: str | None = None, **overrides: Any) -> int:
        """Start a new master (``index=None``) or restart master ``index`` on its old ports.
        ``etcd``: the endpoints this master uses instead of the cluster's (kept for restarts;
        e.g. an ``mc_faults`` proxy address); ``redis``: the same on a cluster on Redis HA.
        ``overrides``: ``profile``, ``partial_restore``, ``args`` (extra CLI arguments)."""
        if (etcd is not None and self.redis) or (redis is not None and not self.redis):
            raise TargetError(f"start_master: this cluster keeps its HA state in "
                              f"{'Redis (use redis=)' if self.redis else 'etcd (use etcd=)'}")
        if index is None:
            with self._allocating:
                index = len(self.masters)
                m = _Master(index, free_port(), free_port(), None,  # type: ignore[arg-type]
                            self.master_etcd.get(index), self.master_redis.get(index))
                self.masters.append(m)
        else:
            m = self.masters[index]
            if m.process is not None and m.process.alive():
                raise TargetError(f"master {index} is already running")
        if etcd is not None:
            m.etcd = _endpoints(etcd)
        if redis is not None:
            m.redis = redis
        m.process = ManagedProcess(
            f"master-{index}", self._master_argv(m, **overrides), self.workdir / f"master-{index}.log",
            env=reference_env(), ready=http_ok(m.admin + "/health"), ready_timeout=30.0,
            stop_timeout=10.0,
        )
        try:
            m.process.start()
        except ProcessStartError as exc:
            raise TargetError(str(exc)) from None
        return index

    def health(self, index: int) -> dict[str, Any]:
        """The master's ``/health`` document; ``ValueError`` naming what came instead of one."""
        status, body = _http("GET", self.masters[index].admin + "/health", timeout=2.0)
        if not isinstance(body, dict):
            raise ValueError(f"master {index}: GET /health answered {status} with "
                             f"{str(body)[:200]!r}, not a JSON object")
        return body

    def _serving(self) -> list[int]:
        out = []
        for m in self.masters:
            if m.process.alive():
                try:
                    if self.health(m.index).get("service_ready"):
                        out.append(m.index)
                except (OSError, ValueError):
                    continue
        return out

    def leader(self, timeout: float = 10.0) -> int:
        """The index of the serving leader; waits up to ``timeout`` for one."""
        return wait_until(self._serving, timeout, f"a serving leader in cluster {self.cluster_id}",
                          ignore=TRANSIENT)[0]

    def leader_view(self) -> dict[str, Any]:
        """``/leader`` of the first live master that answers: ``{present, leader_address,
        view_version}``; ``{"present": False}`` when none does."""
        for m in self.masters:
            if m.process is not None and m.process.alive():
                try:
                    status, body = _http("GET", m.admin + "/leader", timeout=2.0)
                except OSError:
                    continue
                if status == 200 and isinstance(body, dict):
                    return body
        return {"present": False}

    def serving(self) -> list[int]:
        """Indices of masters that say they serve now (more than one would be split brain)."""
        return self._serving()

    def standbys(self) -> list[int]:
        out = []
        for m in self.masters:
            if m.process.alive():
                try:
                    if self.health(m.index).get("role") == "standby":
                        out.append(m.index)
                except (OSError, ValueError):
                    continue
        return out

    def promotable(self, index: int) -> Mapping[str, Any]:
        """``GET /ha/promotable``: {promotable, reason, validation{ok, dropped_entries},
        applied_seq, primary_seq, keys_restorable}; ``ObservationFailed`` for anything else
        (no answer, another status, another shape)."""
        url = self.masters[index].admin + "/ha/promotable"
        try:
            status, body = _http("GET", url, timeout=10.0)
        except OSError as exc:
            raise ObservationFailed(f"GET {url} (master {index})", f"no answer ({exc})") from None
        if status != 200 or not isinstance(body, dict) or "promotable" not in body:
            raise ObservationFailed(f"GET {url} (master {index})",
                                    f"HTTP {status}: {str(body)[:200]!r}")
        return body

    def replication(self, index: int) -> dict[str, Any]:
        """Where master ``index`` stands in the OpLog: ``applied_seq`` and ``primary_seq`` (of
        its promotability answer), ``lag`` (``ha_oplog_standby_lag``), ``state``, ``role``."""
        answer = self.promotable(index)
        return {"applied_seq": int(answer["applied_seq"]),
                "primary_seq": int(answer["primary_seq"]),
                "lag": self.metrics(index).get("ha_oplog_standby_lag"),
                "state": answer.get("state"), "role": self.health(index).get("role")}

    def promote(self, index: int, timeout: float = 15.0) -> tuple[int, Mapping[str, Any]]:
        """Planned handover to standby ``index`` (``POST /ha/promote``): (HTTP status, body).
        200 = it is now the serving leader; 409 = refused, the old leader stays."""
        return _http("POST", self.masters[index].admin + "/ha/promote", {"timeout": timeout},
                     timeout=timeout + 10)

    def snapshot(self, index: int, timeout: float = 20.0) -> Mapping[str, Any]:
        """Have standby ``index`` write a snapshot (``POST /ha/snapshot``) as soon as it has
        applied the leader's whole durable prefix (it answers 409 UNAVAILABLE_IN_CURRENT_STATUS
        until then): the snapshot holds every acknowledged write."""
        answers: list[tuple[int, Any]] = []

        def written() -> bool:
            answers.append(_http("POST", self.masters[index].admin + "/ha/snapshot", {},
                                 timeout=30.0))
            status, body = answers[-1]
            if status == 200:
                return True
            if status == 409 and isinstance(body, dict) and \
                    body.get("error") == "UNAVAILABLE_IN_CURRENT_STATUS":
                return False
            raise TargetError(f"snapshot on master {index} failed: HTTP {status}: {body}")

        try:
            wait_until(written, timeout, f"master {index} to write a snapshot", interval=0.05)
        except TimeoutError:
            raise TargetError(f"snapshot on master {index} failed for {timeout:g}s: "
                              f"{answers[-1][1] if answers else 'no answer'}") from None
        return answers[-1][1]

    def key_count(self, index: int) -> int:
        return int(self.metrics(index)["master_key_count"])

    def keys(self, index: int) -> list[str]:
        return _http("GET", self.masters[index].admin + "/get_all_keys", timeout=10.0)[1]["keys"]

    def metrics(self, index: int) -> Mapping[str, float]:
        return parse_metrics(_http("GET", self.masters[index].admin + "/metrics", timeout=5.0)[1])

    def wait_caught_up(self, index: int, timeout: float = 10.0) -> Mapping[str, Any]:
        """Wait until standby ``index`` reports promotable (rfc) / its applied seq reaches the
        leader's durable sequence; returns the last ``promotable`` answer."""
        def done() -> Any:
            p = self.promotable(index)
            return p if p["applied_seq"] >= p["primary_seq"] and p.get("state") == "WATCHING" else None
        return wait_until(done, timeout, f"master {index} caught up", ignore=TRANSIENT)

    def master_log(self, index: int) -> str:
        return self.masters[index].process.log_text()

    # ------------------------------------------------------------------ clients

    def start_client(self, client_id: str | None = None, version: str | None = None,
                     profile: str | None = None, wait_attached: bool = True,
                     timeout: float = 15.0) -> ClientProcess:
        """A store-client process mounting one segment; ``version`` overrides the protocol
        version it announces (version-skew tests)."""
        index = len(self.clients)
        client_id = client_id or f"client-{index}"
        handle = start_client_process(
            self.etcd, self.cluster_id, self.workdir, index, client_id, profile or self.profile,
            version, self.reattach_timeout, self.heartbeat_interval, self.client_stall,
            wait_attached=False, redis=self.redis)
        self.clients.append(handle)
        if wait_attached:
            self.wait_attached(handle, timeout)
        return handle

    def wait_attached(self, handle: ClientProcess, timeout: float = 15.0) -> None:
        """Wait until store-client process ``handle`` says it is attached to a master."""
        wait_until(lambda: handle.status()["attached"], timeout,
                   f"client {handle.client_id} attached", ignore=TRANSIENT)

    def endpoint(self) -> MasterEndpoint:
        """Where store clients of another reference target (another profile) find these
        masters: the cluster's etcd and cluster id, the reference master protocol; and where a
        Mooncake release's client finds the leader's Mooncake-wire listener."""
        import reference_engine
        from reference_engine.master.protocol import MASTER_VERSION

        try:
            listeners = ((MOONCAKE_PROTOCOL, self.wire_listener(self.leader())),)
        except TimeoutError:  # no leader now: no Mooncake-wire address to hand out
            listeners = ()
        return MasterEndpoint(PROTOCOL, tuple(self.etcd), self.cluster_id, MASTER_VERSION,
                              f"reference-engine {reference_engine.__version__} "
                              f"({self.profile})", redis=self.redis, listeners=listeners)

    def client(self, index: int = 0) -> ClientProcess:
        return self.clients[index]

    def library_client(self, **options: Any) -> Any:
        """An in-process ``StoreClient`` (closed with the cluster)."""
        from reference_engine.master.store_client import StoreClient

        options.setdefault("profile", self.profile)
        options.setdefault("reattach_timeout", self.reattach_timeout)
        options.setdefault("heartbeat_interval", self.heartbeat_interval)
        options.setdefault("stall_seconds", self.client_stall)
        client = StoreClient(f"redis://{self.redis}" if self.redis else self.etcd,
                             self.cluster_id, **options)
        self._library_clients.append(client)
        return client

    # ------------------------------------------------------------------ segments

    def _operator(self) -> Any:
        """An in-process client for operator calls (drain, segment status), started once."""
        if getattr(self, "_operator_client", None) is None:
            self._operator_client = self.library_client(client_id=f"operator-{uuid.uuid4().hex[:6]}")
            self._attach(self._operator_client)
        return self._operator_client

    def _attach(self, client: Any) -> Any:
        """Start an in-process library client and wait until it attached to the leader, for
        ATTACH_WAIT seconds in which the masters and this process could run. A starved machine
        is said as the harness's (PreconditionUnestablished), a leader that had the CPU and
        still took nobody as the reference's finding (ObservationFailed, with what was seen)."""
        client.start()
        live = {m.process.pid: f"master {m.index}" for m in self.masters if m.process.alive()}
        live[os.getpid()] = "the harness"
        deadline = StarvedDeadline(ATTACH_WAIT, tuple(live), live, ours=(os.getpid(),))
        wait_until(lambda: client.attached or deadline.expired(), STRETCH_CAP * ATTACH_WAIT + 5,
                   f"client {client.client_id} to attach", interval=0.02)
        if client.attached:
            return client
        seen = f"client {client.client_id}: no master attached ({client.stats.last_error})"
        if deadline.starved_out():
            raise PreconditionUnestablished(f"harness starved of CPU: {seen}: "
                                            f"{deadline.describe()}")
        raise ObservationFailed(seen, deadline.describe())

    def client_segment(self, index: int) -> str:
        """The segment (transport endpoint) store client ``index`` mounted."""
        return f"{self.clients[index].client_id}@127.0.0.1"

    def replica_segments(self, key: str) -> list[str]:
        """The segments holding ``key``'s replicas, as the leader reports them."""
        found = self._operator().get(key)
        return sorted({d[0] for r in found["replicas"] for d in r["descriptors"]})

    def replica_descriptors(self, key: str) -> list[list[tuple[str, int, int]]]:
        """``key``'s replicas as the leader's replica list has them: per replica its memory
        descriptors ``(segment endpoint, address, size)``; none when the leader has no such
        object."""
        from reference_engine.master.error_codes import ErrorCode, MasterError

        try:
            found = self._operator().get(key)
        except MasterError as exc:
            if exc.code is ErrorCode.OBJECT_NOT_FOUND:
                return []
            raise
        return [[(str(e), int(a), int(n)) for e, a, n in r["descriptors"]]
                for r in found["replicas"]]

    def drain_segment(self, segment: str) -> None:
        """Start draining ``segment`` (OK -> DRAINING): readable, no new allocations."""
        self._operator().call("drain_segment", {"endpoint": segment})

    def segment_status(self, segment: str) -> str | None:
        """OK, DRAINING, DRAINED, UNMOUNTING, ... or None once the segment is gone."""
        from reference_engine.master.error_codes import ErrorCode, MasterError

        try:
            return self._operator().call("segment_status", {"endpoint": segment})["status"]
        except MasterError as exc:
            if exc.code is ErrorCode.SEGMENT_NOT_FOUND:
                return None
            raise

    # ------------------------------------------------------------------ faults

    def plant_bad_descriptor(self, victim_key: str, key: str = "planted-bad-descriptor",
                             kind: str = "overlap") -> int:
        """Append to the replicated OpLog (through the leader's debug RPC, without touching the
        leader's own index) an object whose memory descriptor overlaps ``victim_key``'s
        (``kind`` "overlap") or lies on a segment nobody mounted ("unknown_segment"), or whose
        metadata is malformed ("malformed": a size of 0, no replica), or an object of two
        replicas ("overlap_beside_valid", "unknown_segment_beside_valid"): the overlapping one,
        or one on a segment nobody mounted, and a valid one on memory freed just before (a
        spare object the planter puts and removes), or ("overlap_on_every_replica") two
        replicas, one on exactly the victim's memory and one half its size up, or one
        descriptor by the end of the victim's segment (``SEGMENT_END``, ``at_segment_end``:
        across it, past it, or ending at it), the segment's base and capacity as the leader's
        ``segment_status`` reports them, or ("zero_size") an object of size 0 whose one
        descriptor is the victim's address, 0 bytes long. Returns the entry's sequence id."""
        planted_kind(kind)
        client = self.library_client(client_id=f"planter-{uuid.uuid4().hex[:6]}")
        self._attach(client)
        try:
            victim = client.get(victim_key)
            endpoint, address, size = victim["replicas"][0]["descriptors"][0]
            descriptor = ([endpoint, address + max(1, size // 2), size]
                          if kind in ("overlap", "overlap_beside_valid")
                          else [f"unmounted-{endpoint}", address, size])
            if kind in SEGMENT_END:
                segment = client.call("segment_status", {"endpoint": endpoint})
                end = int(segment["base"]) + int(segment["capacity"])
                descriptor = [endpoint, at_segment_end(kind, end, size), size]
            replicas = [{"id": 10**9, "status": "COMPLETE", "descriptors": [descriptor]}]
            if kind == "overlap_on_every_replica":  # the victim's own range, then half up
                replicas = [{"id": 10**9 + 1, "status": "COMPLETE",
                             "descriptors": [[endpoint, address, size]]},
                            {"id": 10**9, "status": "COMPLETE",
                             "descriptors": [[endpoint, address + max(1, size // 2), size]]}]
            if kind in ("overlap_beside_valid", "unknown_segment_beside_valid"):
                replicas.insert(0, {"id": 10**9 + 1, "status": "COMPLETE",
                                    "descriptors": [_freed_range(client, f"{key}-spare", size)]})
            if kind == "zero_size":  # the victim's address, 0 bytes long, in an object of size 0
                replicas[0]["descriptors"] = [[endpoint, address, 0]]
            payload = ({"client_id": "planter", "size": 0, "replicas": []} if kind == "malformed"
                       else {"client_id": "planter", "size": 0 if kind == "zero_size" else size,
                             "replicas": replicas})
            result = client.call("plant_raw_entry",
                                 {"op_type": PLANT_OP_PUT_END, "key": key, "payload": payload})
            return int(result["sequence_id"])
        finally:
            client.close()

    def plant_removal(self, key: str) -> int:
        """Append a REMOVE of ``key`` to the replicated OpLog (the leader's debug RPC) without
        the leader applying it: a standby replays it. Returns its sequence id."""
        client = self.library_client(client_id=f"planter-{uuid.uuid4().hex[:6]}")
        self._attach(client)
        try:
            result = client.call("plant_raw_entry",
                                 {"op_type": PLANT_OP_REMOVE, "key": key, "payload": ""})
            return int(result["sequence_id"])
        finally:
            client.close()

    # ------------------------------------------------------------------ teardown

    def logs(self) -> str:
        parts = []
        for m in self.masters:
            if m.process is not None:
                parts.append(f"===== master {m.index} ({m.address})\n{m.process.log_tail(60)}")
        for c in self.clients:
            parts.append(f"===== client {c.client_id}\n{c.process.log_tail(30)}")
        return "\n".join(parts)

    def close(self) -> None:
        self.close_wire_listeners()
        for client in self._library_clients:
            client.close()
        self._library_clients.clear()
        processes = [c.process for c in self.clients] + [
            m.process for m in self.masters if m.process is not None]
        for process in processes:  # all stop side by side; each is then reaped in turn
            process.send_signal(signal.SIGTERM)
        for c in self.clients:
            c.process.terminate()
            release_port(c.control_port)
        for m in self.masters:
            if m.process is not None:
                m.process.terminate()
            release_port(m.rpc_port)
            release_port(m.admin_port)
