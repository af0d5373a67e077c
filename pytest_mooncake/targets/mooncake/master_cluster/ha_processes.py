"""``MasterClusterHandle`` over real ``mooncake_master`` processes in HA mode on one etcd, with
real ``mooncake.store`` clients in driver processes, started through a launcher (this host or a
container). What the handle reads from the masters' admin services is ``master_cluster/admin_view``'s."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.releases.probes import parse_config_echo
from pytest_mooncake.runtime.processes import ManagedProcess, ProcessStartError, http_ok
from pytest_mooncake.targets.base import (
    Capability,
    ComponentStartError,
    MasterEndpoint,
    TargetError,
    TargetLacks,
)
from pytest_mooncake.targets.master_wire_clients import MasterWireClients
from pytest_mooncake.targets.mooncake.launchers import Launcher
from pytest_mooncake.targets.mooncake.master_cluster.admin_view import MooncakeMasters
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.snapshot_requests import (
    LOCAL_PATH_ENV,
    SnapshotMeans,
    lack,
    means_for,
    refuse_oplog,
)
from pytest_mooncake.targets.mooncake.option_rules import (
    MOONCAKE_ETCD_ROUTING,
    check_master_options,
    lacks_etcd_routing,
    whole_seconds,
)
from pytest_mooncake.targets.mooncake.profile_strategies import (
    DEFAULT_PROFILE,
    PROFILES,
    DeploymentProfile,
)
from pytest_mooncake.targets.mooncake.store_clients import (
    PROTOCOL,
    RefusedStoreClient,
    StoreClient,
    start_store_client,
)
from pytest_mooncake.targets.process_masters import ProcessMasters


@dataclass
class _Master:
    index: int
    rpc_port: int
    metrics_port: int
    process: ManagedProcess | None = None
    admin_port: int = 0
    """Where this host reaches ``metrics_port`` (the same port unless published by docker)."""
    admin_host: str = "127.0.0.1"
    """The address this host reaches the master at (a container's own, in the docker target)."""
    etcd: list[str] | None = None
    """This master's own etcd endpoints (per-master routing, e.g. through a fault proxy in
    front of the cluster's etcd); None: the cluster's."""

    @property
    def admin(self) -> str:
        return f"http://{self.admin_host}:{self.admin_port or self.metrics_port}"

    def serves(self, address: str) -> bool:
        """Whether ``address`` (a leader address from /health or /leader) is this master's."""
        return address.rpartition(":")[2] == str(self.rpc_port)


class MooncakeMasterCluster(ProcessMasters, MooncakeMasters, MasterWireClients):
    """N ``mooncake_master --enable_ha`` processes and M store clients, deployed as ``profile``
    (``profile_strategies``; the default ``ha-oplog`` turns the OpLog on).

    Every flag is spelled as the build's ``mooncake_master --help`` lists it (``master_cluster/flags``);
    a setting the build lacks is left out (``dropped``) or, when the test asked for it, n/a.

    Options: ``oplog`` (default: what the profile sets; ``ha-oplog``: ``--enable_oplog=true``
    where the build has the flag, so standbys follow the leader through the OpLog in etcd;
    0.3.10-0.3.12 have none and elect a leader without it; ``oplog=True`` on such a build is
    n/a), ``client_ttl`` (s; the TTL flags
    take whole seconds, so a fraction is rounded up, and the value the master echoes in its
    config line is checked), ``flags`` (extra ``{name: value}`` master flags; one the build
    lacks is n/a), ``env`` (extra environment, e.g. ``MOONCAKE_SNAPSHOT_LOCAL_PATH``),
    ``snapshots`` (the masters write snapshots under ``<workdir>/snapshots`` through the means
    the build's flags offer, ``master_cluster/snapshot_requests``; ``snapshot(i)`` waits for one),
    ``trim_oplog_after_snapshot`` (reported by ``snapshot(i)``: no OpLog, or one the snapshot
    holds whole), ``cluster_id``, ``ready_timeout``."""

    def __init__(self, launcher: Launcher, workdir: Path, etcd_endpoints: list[str],
                 masters: int = 2, clients: int = 1,
                 profile: DeploymentProfile | None = None,
                 etcd_routing: str = MOONCAKE_ETCD_ROUTING, **options: Any):
        options = check_master_options(options, launcher.version, etcd_routing)
        self.etcd_routing = etcd_routing
        """Why this placement cannot give one master other etcd endpoints ("": it can: its
        masters run on this host and reach what the test reaches, e.g. a fault proxy)."""
        routed: dict[int, Any] = options.pop("master_etcd", {})
        self.profile = profile or PROFILES[DEFAULT_PROFILE]
        """How the build is deployed (``profile_strategies``): the settings it adds."""
        self.launcher = launcher
        self.build = launcher.version
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.etcd = list(etcd_endpoints)
        self.cluster_id = options.get("cluster_id") or f"mc_{os.getpid()}_{self.workdir.name}"
        self.oplog_cluster = self.cluster_id
        self.options = options
        self.ready_timeout = float(options.get("ready_timeout") or 30.0)
        self.client_ttl = (None if options.get("client_ttl") is None
                           else whole_seconds(options["client_ttl"], "client_ttl"))
        self.masters: list[_Master] = []
        self.clients: list[StoreClient] = []
        self.drain_jobs: dict[str, str] = {}
        self.where = f"cluster {self.cluster_id}"
        self.dropped: dict[str, str] = {}
        """Settings the build's master has no flag for, left out (e.g. ``metrics_host``)."""
        self._flags: MasterFlags | None = None
        self.snapshot_means = self._snapshot_means() if options.get("snapshots") else None
        if masters:
            self._refuse_unspellable()
            self._refuse_undeployable()
        try:
            for i in range(masters):
                self.start_master(etcd=routed.get(i))
            if clients:
                self.leader(timeout=self.ready_timeout)
            for _ in range(clients):
                self.start_client()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ masters

    def _settings(self, m: _Master) -> dict[str, Any]:
        """What every master of this cluster is told, by setting name (``master_cluster/flags`` spells
        them as the build does)."""
        settings: dict[str, Any] = {
            "enable_ha": True, "etcd_endpoints": ";".join(m.etcd or self.etcd),
            "cluster_id": self.cluster_id, **self.launcher.master_rpc, "rpc_port": m.rpc_port,
            "metrics_host": self.launcher.bind_host, "metrics_port": m.metrics_port}
        settings.update(self.profile.master_settings(self.flags, self.options.get("oplog")))
        if self.client_ttl is not None:
            settings[self.flags.client_ttl_flag or "client_ttl"] = self.client_ttl
        if self.snapshot_means is not None:
            settings["enable_oplog"] = self.snapshot_means.oplog
            settings.update(self.snapshot_means.settings())
        settings.update(self.options.get("flags") or {})
        return settings

    def _argv(self, m: _Master) -> list[str]:
        argv, dropped = self.flags.argv(self.launcher.master_binary(), self._settings(m))
        self.dropped = dropped
        return argv

    @property
    def flags(self) -> MasterFlags:
        """The build's master flags (asked of the launcher once)."""
        if self._flags is None:
            self._flags = self.launcher.master_flags
        return self._flags

    def _refuse_unspellable(self) -> None:
        """Before any master starts: what the test asked for that the build's master lacks is
        n/a naming the probed flag (never ERROR: unknown command line flag in a test body)."""
        if self.client_ttl is not None and self.flags.client_ttl_flag is None:
            raise TargetLacks(Capability.MASTER_CLUSTER, (
                f"client_ttl: {self.flags.lacks(' or --'.join(family.CLIENT_TTL_FLAGS))}"))
        if self.options.get("oplog") and not self.flags.has("enable_oplog"):
            raise TargetLacks(Capability.MASTER_CLUSTER,
                              f"oplog=True: {self.flags.lacks('enable_oplog')}")
        self.flags.refuse_missing(self.options.get("flags") or {}, "flags={...}")

    def deployed(self) -> dict[str, Any]:
        """The master flags and environment this cluster's masters were started with, with
        the values that differ per cluster as placeholders (``deployment_seen`` gathers them per
        column into the report)."""
        if not self.masters:
            return {}
        argv = self._argv(self.masters[0])[1:]
        return {"flags": [_placeholder(a) for a in argv],
                "env": {k: v.replace(str(self.workdir), "<cluster workdir>")
                        for k, v in sorted(self._env().items())}}

    def _refuse_undeployable(self) -> None:
        """A profile the build cannot be deployed as (``ha-snapshot`` on a build without
        ``--enable_snapshot_restore``) is n/a naming the flags it lacks."""
        why = self.profile.lacks(self.flags)
        if why:
            raise TargetLacks(Capability.MASTER_CLUSTER, why)

    def _env(self) -> dict[str, str]:
        env = {**self.profile.master_env(self.workdir), **(self.options.get("env") or {})}
        if self.snapshot_means is not None:
            env.setdefault(LOCAL_PATH_ENV, str(self.workdir / "snapshots"))
        return env

    def _snapshot_means(self) -> SnapshotMeans:
        """How this build's masters write and restore snapshots (``snapshots=True``), from the
        flags its ``--help`` lists; a build with no complete means is n/a naming them."""
        means = means_for(self.flags.flags)
        if means is None:
            raise TargetLacks(Capability.MASTER_SNAPSHOT,
                              lack(self.flags.flags, self.build, self.flags.source) or "")
        refuse_oplog(means, self.options.get("oplog"), self.build)
        return means

    def snapshot(self, index: int) -> dict[str, Any]:
        """A snapshot begun after this call, so holding every acknowledged write, by master
        ``index`` or by the master the build has write them (``master_cluster/snapshot_requests``): the
        report names the writer, the snapshot and how many objects it holds."""
        if self.snapshot_means is None:
            raise TargetError(f"{self.where} was started without snapshots=True")
        return self.snapshot_means.take(self, index, self.workdir / "snapshots")

    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        """Start master ``index`` again (same ports, same etcd), or a new one; returns its
        index. ``etcd``: a new master's own etcd endpoints (per-master routing), refused with
        ``TargetLacks`` where the placement has none (``etcd_routing`` says why)."""
        if etcd is not None and self.etcd_routing:
            raise lacks_etcd_routing("start_master(etcd=...)", self.etcd_routing)
        if index is None:
            self._refuse_unspellable()
            m = _Master(len(self.masters), self.launcher.port(), self.launcher.port(),
                        etcd=None if etcd is None else
                        [etcd] if isinstance(etcd, str) else list(etcd))
            self.masters.append(m)
        else:
            if etcd is not None:
                raise lacks_etcd_routing(f"start_master({index}, etcd=...)", (
                    "a restarted mooncake_master keeps the command line, and so the etcd "
                    "endpoints, it was first started with; start a new master instead"))
            m = self.masters[index]
            if m.process is not None and m.process.alive():
                raise TargetError(f"master {index} is already running (pid {m.process.pid})")
        first = m.process is None
        try:
            if first:
                m.process = self.launcher.start(
                    f"mooncake-master-{self.cluster_id}-{m.index}", self._argv(m), self._env(),
                    self._admin_ready(m), self.ready_timeout, publish=[m.metrics_port])
            else:
                m.process.start()
        except ProcessStartError as exc:
            raise ComponentStartError(
                f"mooncake_master {m.index} of {self.build} did not {'start' if first else 'restart'}"
                f" (argv: {' '.join(m.process.argv if m.process else self._argv(m))}): {exc}"
            ) from None
        m.admin_port = self.launcher.host_port(m.process, m.metrics_port)
        m.admin_host = self.launcher.host_address(m.process)
        self._check_client_ttl(m)
        return m.index

    def _check_client_ttl(self, m: _Master) -> None:
        """The master echoes its config at start (``client_ttl=N``; 0.3.14
        ``client_active_ttl_sec=N``); a different N, or an echo without the key, means the TTL
        was not honoured as asked, which would silently change what a liveness test judges."""
        if self.client_ttl is None:
            return
        flag = self.flags.client_ttl_flag
        echoes = family.LOG_PATTERNS["config_echo"].findall(m.process.log_text())
        if not echoes:
            return  # a build that echoes no config: nothing to check against
        echoed = parse_config_echo(echoes[-1]).get(flag)
        if echoed is None or int(echoed) != self.client_ttl:
            raise ComponentStartError(
                f"master {m.index} was started with --{flag}={self.client_ttl} but its config "
                f"line says {flag}={echoed}" + ("" if echoed is not None else
                f" (absent; the line: {echoes[-1][:300]})"))

    def _admin_ready(self, m: _Master) -> Any:
        def ready(proc: ManagedProcess) -> bool:
            port = self.launcher.host_port(proc, m.metrics_port)
            return http_ok(f"http://{self.launcher.host_address(proc)}:{port}/health")(proc)

        ready.__doc__ = f"master {m.index} answers GET /health on its admin port"
        return ready

    def admin_url(self, index: int) -> str:
        return self.masters[index].admin

    def observed(self) -> list[int]:
        return [m.index for m in self.masters if self.alive(m.index)]

    def index_of(self, address: str) -> int | None:
        return next((m.index for m in self.masters if m.serves(address)), None)

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
                f"mooncake.store of {self.build} announces its own build; it has no "
                f"means to announce version {version or profile!r}"))
        client = start_store_client(self.launcher, self.workdir, self.etcd, self.cluster_id,
                                    len(self.clients), client_id, timeout or self.ready_timeout)
        if isinstance(client, RefusedStoreClient):  # its own build's masters: not a skew answer
            raise ComponentStartError(client.why)
        self.clients.append(client)
        return client

    def endpoint(self) -> MasterEndpoint:
        """Where store clients of another Mooncake target (another build) find these masters:
        the cluster's etcd and ``MC_STORE_CLUSTER_ID``; they speak mooncake_master's RPC."""
        install = getattr(self.launcher, "install", None)
        return MasterEndpoint(PROTOCOL, tuple(self.etcd), self.cluster_id,
                              getattr(install, "dist_version", None) or "", self.launcher.version,
                              host_reachable=self.launcher.bind_host == "127.0.0.1")

    def client(self, index: int = 0) -> StoreClient:
        return self.clients[index]

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
        self.close_wire_clients()
        for c in self.clients:
            c.control.close()
            c.process.terminate(timeout=3)
        for m in self.masters:
            if m.process is not None:
                m.process.terminate(timeout=3)
            self.launcher.release(m.rpc_port)
            self.launcher.release(m.metrics_port)


PER_CLUSTER = ("etcd_endpoints", "cluster_id", "rpc_port", "port", "metrics_port")
"""Master flags whose value differs per cluster or run (recorded as ``<NAME>``)."""


def _placeholder(arg: str) -> str:
    name, sep, _ = arg.partition("=")
    return f"{name}=<{name.lstrip('-')}>" if sep and name.lstrip("-") in PER_CLUSTER else arg
