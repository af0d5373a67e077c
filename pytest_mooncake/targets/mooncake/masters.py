"""``MasterClusterHandle`` over real ``mooncake_master`` processes in HA mode on one etcd, with
real ``mooncake.store`` clients in driver processes.

Leader and role come from each master's admin ``/health`` (``role``, ``ha_state``,
``service_ready``); key counts and metrics from ``/metrics``. Promotability is probed, not
invented: the first call asks the admin service for a promotability endpoint and, when none
answers, raises ``TargetLacks`` naming what was asked.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.processes import ManagedProcess, http_ok
from pytest_mooncake.targets.base import Capability, TargetError, TargetLacks
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

    def alive(self) -> bool:
        return self.process.alive()


def payload(key: str, size: int) -> bytes:
    seed = key.encode() or b"-"
    return (seed * (size // len(seed) + 1))[:size]


class MooncakeMasterCluster:
    """N ``mooncake_master --enable_ha`` processes (OpLog on by default) and M store clients.

    Options: ``oplog`` (default True: standbys follow the leader through the batch OpLog in
    etcd; without it 0.3.13 still elects a leader, observed),
    ``client_ttl`` (s), ``flags`` (extra ``{name: value}`` master flags), ``env`` (extra
    environment, e.g. ``MOONCAKE_SNAPSHOT_LOCAL_PATH``), ``cluster_id``, ``ready_timeout``."""

    def __init__(self, placement: Placement, workdir: Path, etcd_endpoints: list[str],
                 masters: int = 2, clients: int = 1, **options: Any):
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
        self.masters: list[_Master] = []
        self.clients: list[StoreClient] = []
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
        if self.options.get("client_ttl") is not None:
            argv.append(f"--client_ttl={int(self.options['client_ttl'])}")
        for name, value in (self.options.get("flags") or {}).items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            argv.append(f"--{name}={value}")
        return argv

    def _env(self) -> dict[str, str]:
        return dict(self.options.get("env") or {})

    def start_master(self, index: int | None = None) -> int:
        """Start master ``index`` again (same ports), or a new one; returns its index."""
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
        return m.index

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
            raise TargetLacks(Capability.VERSION_SKEW, (
                f"mooncake.store of {self.placement.version} announces its own build; it has no "
                f"means to announce version {version or profile!r}"))
        index = len(self.clients)
        ready_file = self.workdir / f"client-{index}.ready"
        ready_file.unlink(missing_ok=True)
        te_port = self.placement.port()
        etcd_uri = "etcd://" + ";".join(self.etcd)
        name = f"mooncake-client-{self.cluster_id}-{client_id or index}"
        control = self.placement.control_port
        argv = self.placement.driver_argv(
            "store", "--hostname", f"{self.placement.host_name(name)}:{te_port}",
            "--metadata", etcd_uri, "--master", etcd_uri, "--ready-file", str(ready_file),
            "--control-host", self.placement.bind_host, "--control-port", str(control))
        env = {"MC_STORE_CLUSTER_ID": self.cluster_id}

        def ready(_: ManagedProcess) -> bool:
            return ready_file.exists()

        ready.__doc__ = "the store driver wrote its ready file (setup returned 0)"
        proc = self.placement.start(name, argv, env, ready, timeout or self.ready_timeout,
                                    publish=[control] if control else [])
        info = read_ready_file(ready_file) or {}
        port = self.placement.host_port(proc, control or int(info["control_port"]))
        client = StoreClient(index, proc, ControlClient(proc, port))
        self.clients.append(client)
        self.placement.release(te_port)
        return client

    def client(self, index: int = 0) -> StoreClient:
        return self.clients[index]

    # ------------------------------------------------------------------ teardown

    def logs(self) -> str:
        parts = []
        for m in self.masters:
            if m.process is not None:
                parts.append(f"== master {m.index} ({m.address}, admin {m.admin})\n"
                             f"{m.process.log_tail(60)}")
        for c in self.clients:
            parts.append(f"== client {c.index}\n{c.process.log_tail(30)}")
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
