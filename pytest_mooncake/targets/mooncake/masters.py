"""``MasterClusterHandle`` over real ``mooncake_master`` processes in HA mode on one etcd, with
real ``mooncake.store`` clients in driver processes.

Leader and role come from each master's admin ``/health`` (``role``, ``ha_state``,
``service_ready``); key counts and metrics from ``/metrics``. Promotability is probed, not
invented: the first call asks the admin service for a promotability endpoint and, when none
answers, raises ``TargetLacks`` naming what was asked. Segments (MP-10) go through the serving
leader's admin service: ``/get_segments_detail`` (names, endpoints, status),
``/batch_query_keys`` (replica endpoints, without granting a read lease), ``POST
/api/v1/drain_jobs`` and ``/api/v1/segments/status``.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.processes import ManagedProcess, http_ok
from pytest_mooncake.targets.base import Capability, MasterEndpoint, TargetError, TargetLacks
from pytest_mooncake.targets.mooncake.control import ControlClient, b64, read_ready_file, unb64
from pytest_mooncake.targets.mooncake.placement import Placement

PROMOTABILITY_PATHS = ("/ha/promotable", "/promotable", "/api/v1/ha/promotable")
MASTER_OPTIONS = ("oplog", "snapshots", "client_ttl", "lease_ttl", "flags", "env", "cluster_id",
                  "ready_timeout")


def admin_get(url: str, timeout: float = 2.0) -> tuple[int | None, str]:
    """(status, body) of a GET on loopback; status None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return None, str(exc)


def admin_post(url: str, body: Mapping[str, Any], timeout: float = 5.0) -> tuple[int | None, str]:
    """(status, body) of a JSON POST on loopback; status None when nothing answered."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return None, str(exc)


def json_or_none(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def whole_seconds(value: Any, option: str) -> int:
    """0.3.13's TTL flags are int64 seconds: a fractional TTL is rounded up (never shortened);
    anything that is not a positive number is refused naming the option."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"master_cluster: {option} must be a positive number of seconds, "
                         f"got {value!r}")
    return math.ceil(value)


def lacks_etcd_routing(option: str, why: str) -> TargetLacks:
    """The refusal of per-master etcd routing (``master_etcd={i: address}`` or
    ``start_master(etcd=address)``) by a target without the means: the test is n/a with
    ``option`` named, instead of running with every master on the cluster's etcd."""
    return TargetLacks(Capability.MASTER_CLUSTER, (
        f"{option}: no per-master etcd routing ({why}; routing one master's etcd traffic, e.g. "
        f"through an mc_faults proxy, is a reference-target option)"))


MOONCAKE_ETCD_ROUTING = ("every mooncake_master this target starts gets the cluster's "
                         "--etcd_endpoints")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format to ``{"name{labels}": value}`` (comments and junk skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
    return out


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


@dataclass
class _Master:
    index: int
    rpc_port: int
    metrics_port: int
    process: ManagedProcess | None = None
    admin_port: int = 0
    """Where this host reaches ``metrics_port`` (the same port unless published by docker)."""

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port or self.metrics_port}"

    def serves(self, address: str) -> bool:
        """Whether ``address`` (a leader address from /health or /leader) is this master's."""
        return address.rpartition(":")[2] == str(self.rpc_port)


@dataclass
class StoreClient:
    """A real ``mooncake.store`` client in a driver process. Each call returns
    ``{"ok": bool, "result": {...}}`` or ``{"ok": False, "error": ...}`` (the shape the reference
    target's clients use)."""

    index: int
    process: ManagedProcess
    control: ControlClient
    hostname: str = ""
    """``MooncakeDistributedStore.get_hostname()``: the name its segment is mounted under."""
    history: list[dict[str, Any]] = field(default_factory=list)

    def _op(self, op: str, **args: Any) -> dict[str, Any]:
        started = time.time()
        reply = self.control.call(op, **args)
        ok = bool(reply.pop("ok", False))
        result = {"ok": ok, "result": reply} if ok else {"ok": False, "error": reply.get(
            "error") or f"{op} returned rc={reply.get('rc')}", "result": reply}
        self.history.append({"op": op, "args": {k: v for k, v in args.items() if k != "data"},
                             "start": started, "end": time.time(), "result": result})
        return result

    def put(self, key: str, size: int = 64, data: bytes | None = None) -> dict[str, Any]:
        """Put ``data`` (default ``size`` bytes derived from the key, so a get can be checked)."""
        return self._op("put", key=key, data=b64(data if data is not None else payload(key, size)))

    def get(self, key: str) -> dict[str, Any]:
        out = self._op("get", key=key)
        res = out.get("result", {})
        if out["ok"]:
            data = unb64(res.pop("data", ""))
            res["size"], res["data"] = len(data), data
            if not res.get("found"):
                return {"ok": False, "error": f"get {key!r}: not found (empty reply)", "result": res}
        return out

    def exists(self, key: str) -> dict[str, Any]:
        return self._op("exists", key=key)

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        """``force`` skips the object's lease (0.3.13 refuses to remove a leased object)."""
        return self._op("remove", key=key, force=force)

    def kill(self) -> None:
        self.control.close()
        self.process.kill()

    def stop(self) -> None:
        self.control.close()
        self.process.terminate(timeout=3)

    def alive(self) -> bool:
        return self.process.alive()


PROTOCOL = "mooncake-coro-rpc"
"""``Target.master_protocol`` of Mooncake builds: mooncake_master's RPC (coro_rpc with
struct_pack), spoken by ``mooncake.store`` clients."""


def start_store_client(placement: Placement, workdir: Path, etcd: list[str], cluster_id: str,
                       index: int, client_id: str | None, ready_timeout: float) -> StoreClient:
    """A real ``mooncake.store`` client in a driver process on the cluster ``cluster_id`` of
    ``etcd`` (it finds the leader there); ready once ``setup`` returned 0."""
    ready_file = Path(workdir) / f"client-{index}.ready"
    ready_file.unlink(missing_ok=True)
    te_port = placement.port()
    etcd_uri = "etcd://" + ";".join(etcd)
    name = f"mooncake-client-{cluster_id}-{client_id or index}"
    control = placement.control_port
    argv = placement.driver_argv(
        "store", "--hostname", f"{placement.host_name(name)}:{te_port}",
        "--metadata", etcd_uri, "--master", etcd_uri, "--ready-file", str(ready_file),
        "--control-host", placement.bind_host, "--control-port", str(control))
    env = {"MC_STORE_CLUSTER_ID": cluster_id}

    def ready(_: ManagedProcess) -> bool:
        return ready_file.exists()

    ready.__doc__ = "the store driver wrote its ready file (setup returned 0)"
    proc = placement.start(name, argv, env, ready, ready_timeout,
                           publish=[control] if control else [])
    info = read_ready_file(ready_file) or {}
    port = placement.host_port(proc, control or int(info["control_port"]))
    client = StoreClient(index, proc, ControlClient(proc, port), str(info.get("hostname", "")))
    placement.release(te_port)
    return client


def payload(key: str, size: int) -> bytes:
    seed = key.encode() or b"-"
    return (seed * (size // len(seed) + 1))[:size]


class MooncakeMasterCluster:
    """N ``mooncake_master --enable_ha`` processes (OpLog on by default) and M store clients.

    Options: ``oplog`` (default True: standbys follow the leader through the batch OpLog in
    etcd; without it 0.3.13 still elects a leader, observed),
    ``client_ttl`` (s; ``--client_ttl`` takes whole seconds, so a fraction is rounded up, and
    the value the master echoes in its config line is checked), ``flags`` (extra ``{name: value}`` master flags), ``env`` (extra
    environment, e.g. ``MOONCAKE_SNAPSHOT_LOCAL_PATH``), ``cluster_id``, ``ready_timeout``."""

    def __init__(self, placement: Placement, workdir: Path, etcd_endpoints: list[str],
                 masters: int = 2, clients: int = 1, **options: Any):
        if options.pop("master_etcd", None):
            raise lacks_etcd_routing("master_etcd", MOONCAKE_ETCD_ROUTING)
        unknown = sorted(set(options) - set(MASTER_OPTIONS))
        if unknown:
            raise TypeError(f"master_cluster: unknown option(s) {', '.join(unknown)} for the "
                            f"mooncake target (known: {', '.join(MASTER_OPTIONS)})")
        if options.get("snapshots"):
            raise TargetLacks(Capability.MASTER_SNAPSHOT,
                              f"the mooncake target does not drive {placement.version}'s "
                              f"snapshot flags yet")
        self.placement = placement
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.etcd = list(etcd_endpoints)
        self.cluster_id = options.get("cluster_id") or f"mc_{os.getpid()}_{self.workdir.name}"
        self.options = options
        self.ready_timeout = float(options.get("ready_timeout") or 30.0)
        self.client_ttl = (None if options.get("client_ttl") is None
                           else whole_seconds(options["client_ttl"], "client_ttl"))
        self.masters: list[_Master] = []
        self.clients: list[StoreClient] = []
        self.drain_jobs: dict[str, str] = {}
        self._promotability: str | None = None
        try:
            for _ in range(masters):
                self.start_master()
            if clients:
                self.leader(timeout=self.ready_timeout)
            for _ in range(clients):
                self.start_client()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ masters

    def _argv(self, m: _Master) -> list[str]:
        argv = [
            self.placement.master_binary(), "--enable_ha=true",
            f"--etcd_endpoints={';'.join(self.etcd)}", f"--cluster_id={self.cluster_id}",
            *self.placement.master_rpc_flags, f"--rpc_port={m.rpc_port}",
            f"--metrics_host={self.placement.bind_host}", f"--metrics_port={m.metrics_port}",
            f"--enable_oplog={'true' if self.options.get('oplog', True) else 'false'}",
        ]
        if self.client_ttl is not None:
            argv.append(f"--client_ttl={self.client_ttl}")
        for name, value in (self.options.get("flags") or {}).items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            argv.append(f"--{name}={value}")
        return argv

    def _env(self) -> dict[str, str]:
        return dict(self.options.get("env") or {})

    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        """Start master ``index`` again (same ports), or a new one; returns its index.
        ``etcd`` (per-master etcd routing) is refused with ``TargetLacks``."""
        if etcd is not None:
            raise lacks_etcd_routing("start_master(etcd=...)", MOONCAKE_ETCD_ROUTING)
        if index is None:
            m = _Master(len(self.masters), self.placement.port(), self.placement.port())
            self.masters.append(m)
        else:
            m = self.masters[index]
            if m.process is not None and m.process.alive():
                raise TargetError(f"master {index} is already running (pid {m.process.pid})")
        if m.process is None:
            m.process = self.placement.start(
                f"mooncake-master-{self.cluster_id}-{m.index}", self._argv(m), self._env(),
                self._admin_ready(m), self.ready_timeout, publish=[m.metrics_port])
        else:
            m.process.start()
        m.admin_port = self.placement.host_port(m.process, m.metrics_port)
        self._check_client_ttl(m)
        return m.index

    def _check_client_ttl(self, m: _Master) -> None:
        """The master logs its config (``client_ttl=N``) at start; a different N means the flag
        was not honoured, which would silently change what a liveness test judges."""
        if self.client_ttl is None:
            return
        echoed = re.findall(r"client_ttl=(-?\d+)", m.process.log_text())
        if echoed and int(echoed[-1]) != self.client_ttl:
            raise TargetError(f"master {m.index} was started with --client_ttl={self.client_ttl} "
                              f"but its config line says client_ttl={echoed[-1]}")

    def _admin_ready(self, m: _Master) -> Any:
        def ready(proc: ManagedProcess) -> bool:
            port = self.placement.host_port(proc, m.metrics_port)
            return http_ok(f"http://127.0.0.1:{port}/health")(proc)

        ready.__doc__ = f"master {m.index} answers GET /health on its admin port"
        return ready

    def kill_master(self, index: int) -> None:
        """SIGKILL: no lease release; the standby waits for the lease to expire."""
        self.masters[index].process.kill(signal.SIGKILL)

    def stop_master(self, index: int) -> None:
        self.masters[index].process.terminate()

    def alive(self, index: int) -> bool:
        proc = self.masters[index].process
        return proc is not None and proc.alive()

    def health(self, index: int) -> dict[str, Any]:
        status, body = admin_get(self.masters[index].admin + "/health")
        if status != 200:
            return {"error": f"GET /health answered {status}: {body[:200]}"}
        try:
            return json.loads(body)
        except ValueError:
            return {"error": f"GET /health answered non-JSON: {body[:200]}"}

    def serving(self) -> list[int]:
        """Masters whose /health says service_ready (more than one would be split brain)."""
        return [m.index for m in self.masters
                if self.alive(m.index) and self.health(m.index).get("service_ready") is True]

    def leader(self, timeout: float = 10.0) -> int:
        """Index of the serving leader (``service_ready`` in /health, i.e. past 0.3.13's
        leader warm-up of one lease TTL); waits up to ``timeout``."""
        return wait_for(self.serving, timeout, f"serving leader in cluster {self.cluster_id}")[0]

    def standbys(self) -> list[int]:
        return [m.index for m in self.masters
                if self.alive(m.index) and self.health(m.index).get("role") == "standby"]

    def leader_view(self) -> dict[str, Any]:
        """``/leader`` of any live master: ``{present, leader_address, view_version}``."""
        for m in self.masters:
            if self.alive(m.index):
                status, body = admin_get(m.admin + "/leader")
                if status == 200:
                    return json.loads(body)
        return {"present": False}

    def index_of(self, address: str) -> int | None:
        return next((m.index for m in self.masters if m.serves(address)), None)

    def promotable(self, index: int) -> Mapping[str, Any]:
        """The master's own promotability answer, when its admin service has an endpoint for
        it; otherwise ``TargetLacks`` naming the paths that were asked."""
        admin = self.masters[index].admin
        if self._promotability is None:
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
                    f"mooncake_master of {self.placement.version} exposes no promotability "
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
            f"mooncake_master of {self.placement.version} exposes no {what} on a master that is "
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
        status, body = admin_get(self.masters[index].admin + "/get_all_keys", timeout=10.0)
        if status != 200:
            raise TargetError(f"GET /get_all_keys of master {index} answered {status}: "
                              f"{body[:200]}")
        return [line.strip() for line in body.splitlines() if line.strip()]

    def promote(self, index: int, timeout: float = 15.0) -> Any:
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"mooncake_master of {self.placement.version} has no planned-handover endpoint "
            f"(leadership moves only when the leader's etcd lease lapses)"))

    def snapshot(self, index: int) -> Any:
        raise TargetLacks(Capability.MASTER_SNAPSHOT, (
            f"mooncake_master of {self.placement.version} has no endpoint to write a snapshot "
            f"on request"))

    def plant_bad_descriptor(self, victim_key: str, key: str = "planted-bad-descriptor") -> int:
        raise TargetLacks(Capability.MASTER_FAULT_PLANTING, (
            f"mooncake_master of {self.placement.version} has no means to plant an entry in a "
            f"standby's replicated state"))

    def metrics(self, index: int) -> Mapping[str, float]:
        status, body = admin_get(self.masters[index].admin + "/metrics", timeout=5.0)
        if status != 200:
            raise TargetError(f"GET /metrics of master {index} answered {status}: {body[:200]}")
        return parse_metrics(body)

    def master_log(self, index: int) -> str:
        proc = self.masters[index].process
        return proc.log_text() if proc is not None else ""

    # ------------------------------------------------------------------ clients

    def start_client(self, client_id: str | None = None, version: str | None = None,
                     profile: str | None = None, wait_attached: bool = True,
                     timeout: float | None = None) -> StoreClient:
        """A store client that finds the leader through etcd (``MC_STORE_CLUSTER_ID``); it is
        attached once ``setup`` returned, so ``wait_attached`` changes nothing. A ``version`` or
        ``profile`` other than the build's own is version skew this target cannot produce."""
        if version or profile:
            raise TargetLacks(Capability.CLIENT_VERSION, (
                f"mooncake.store of {self.placement.version} announces its own build; it has no "
                f"means to announce version {version or profile!r}"))
        client = start_store_client(self.placement, self.workdir, self.etcd, self.cluster_id,
                                    len(self.clients), client_id, timeout or self.ready_timeout)
        self.clients.append(client)
        return client

    def endpoint(self) -> MasterEndpoint:
        """Where store clients of another Mooncake target (another build) find these masters:
        the cluster's etcd and ``MC_STORE_CLUSTER_ID``; they speak mooncake_master's RPC."""
        install = getattr(self.placement, "install", None)
        return MasterEndpoint(PROTOCOL, tuple(self.etcd), self.cluster_id,
                              getattr(install, "dist_version", None) or "", self.placement.version,
                              host_reachable=self.placement.bind_host == "127.0.0.1")

    def client(self, index: int = 0) -> StoreClient:
        return self.clients[index]

    # ------------------------------------------------------------------ segments (MP-10)

    def _leader_admin(self) -> str:
        return self.masters[self.leader()].admin

    def _endpoint_exists(self, status: int | None, doc: Any, request: str) -> None:
        """A 404 without the admin service's JSON error is an endpoint this build lacks (older
        builds have no drain jobs): the test is n/a, naming the request."""
        if status == 404 and not (isinstance(doc, dict) and "error_message" in doc):
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"mooncake_master of {self.placement.version} has no {request} admin endpoint "
                f"(404)"))

    def segments_detail(self) -> list[dict[str, Any]]:
        """The serving leader's ``/get_segments_detail`` entries (segment_name, te_endpoint,
        status, allocator bytes, ...)."""
        status, body = admin_get(self._leader_admin() + "/get_segments_detail", timeout=5.0)
        doc = json_or_none(body) if status == 200 else None
        if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
            raise TargetError(f"GET /get_segments_detail answered {status}: {body[:200]}")
        return [s for s in doc["segments"] if isinstance(s, dict)]

    def client_segment(self, index: int) -> str:
        """The segment store client ``index`` mounted: its ``get_hostname()``, which 0.3.13
        uses as both segment name and TE endpoint, confirmed against the leader's list."""
        client = self.clients[index]
        names = {s.get("segment_name"): s for s in self.segments_detail()}
        if client.hostname in names:
            return client.hostname
        by_endpoint = [n for n, s in names.items() if s.get("te_endpoint") == client.hostname]
        if by_endpoint:
            return by_endpoint[0]
        raise TargetError(f"store client {index} ({client.hostname}) has no segment in the "
                          f"leader's /get_segments_detail (segments: {sorted(map(str, names))})")

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

    # ------------------------------------------------------------------ teardown

    def logs(self) -> str:
        parts = []
        for m in self.masters:
            if m.process is not None:
                parts.append(f"== master {m.index} (rpc port {m.rpc_port}, admin {m.admin})\n"
                             f"{m.process.log_tail(60)}")
        for c in self.clients:
            parts.append(f"== client {c.index} ({c.hostname})\n{c.process.log_tail(30)}")
        if self.drain_jobs:
            parts.append("== drain jobs and segments, as the leader reports them")
            try:
                parts += [f"{seg}: {json.dumps(self.drain_job(seg))}" for seg in self.drain_jobs]
                parts += [json.dumps(s) for s in self.segments_detail()]
            except (TargetError, TimeoutError) as exc:
                parts.append(f"(not available: {exc})")
        return "\n".join(parts)

    def close(self) -> None:
        for c in self.clients:
            c.control.close()
            c.process.terminate(timeout=3)
        for m in self.masters:
            if m.process is not None:
                m.process.terminate(timeout=3)
            self.placement.release(m.rpc_port)
            self.placement.release(m.metrics_port)
