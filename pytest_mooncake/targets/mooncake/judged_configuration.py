"""What a column of a Mooncake build judged, as the report records it (``deployment``): the
build, its profile (``profile_strategies``), every master flag and environment variable the
harness sets for masters, engines and store clients, and the metadata and HA backends.

Values that differ per cluster (ports, the cluster id, the etcd of the worker) are written as
``<...>`` placeholders; settings a test adds itself are listed under ``per_test`` with the
option that adds them, so a reader sees what every test ran with and what a few add."""

from __future__ import annotations

from typing import Any

from pytest_mooncake.targets.mooncake.cache_knobs import NO_CACHE_ENV, REFRESH_ENV
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.snapshot_requests import means_for
from pytest_mooncake.targets.mooncake.profile_strategies import DeploymentProfile

HA_BASE = {"enable_ha": True, "etcd_endpoints": "<the run's etcd>",
           "cluster_id": "<one per cluster>", "rpc_port": "<free port>",
           "metrics_port": "<free port>"}
"""What every HA master of the family is told, whatever the profile."""
BIND_ENV = "MC_TCP_BIND_ADDRESS"
STORE_CLUSTER_ENV = "MC_STORE_CLUSTER_ID"


def master_base(bind_host: str, rpc: dict[str, str]) -> dict[str, Any]:
    return {**HA_BASE, **rpc, "metrics_host": bind_host}


def record(profile: DeploymentProfile, flags: MasterFlags | None, bind_host: str,
           master_rpc: dict[str, str], cache_env: list[str] | None,
           flags_unknown: str = "") -> dict[str, Any]:
    """The ``deployment`` object of one column (``build`` and ``version`` are the target's)."""
    masters: dict[str, Any] = {"ha_backend": "etcd (--etcd_endpoints)"}
    if flags is None:
        masters["flags"] = f"not known: {flags_unknown or 'the build was not probed'}"
    else:
        settings = {**master_base(bind_host, master_rpc), **profile.master_settings(flags, None)}
        if profile.lacks(flags) is None:
            argv, dropped = flags.argv("mooncake_master", settings)
            masters["flags"] = argv[1:]
            if dropped:
                masters["not_passed"] = dropped
            masters["flags_from"] = flags.source
            left = _left_at_default(flags, argv[1:])
            if left:
                masters["left_at_build_default"] = left
        else:
            masters["flags"] = f"none: {profile.lacks(flags)}"
    masters["env"] = {BIND_ENV: bind_host, **profile.master_env(_Placeholder())}
    per_test = _per_test(flags)
    engine_env = {BIND_ENV: bind_host}
    knobs = sorted(cache_env or [])
    engines = {"env": engine_env, "metadata_backends": ["etcd", "http (mooncake.http_metadata_"
                                                        "server, where a test asks for it)"]}
    if knobs:
        engines["cache_env_read"] = knobs
    return {"profile": profile.describe(flags),
            "masters": masters,
            "engines": engines,
            "clients": {"env": {BIND_ENV: bind_host, STORE_CLUSTER_ENV:
                                "<the cluster id>"},
                        "find_leader": "etcd://<the run's etcd>"},
            "per_test": per_test}


WATCHED_DEFAULTS = ("ha_backend_type", "enable_oplog", "enable_oplog_snapshot", "enable_snapshot",
                   "enable_snapshot_restore", "snapshot_interval_seconds")
"""Master flags whose build default decides what a failover keeps: recorded where not passed."""


def _left_at_default(flags: MasterFlags, argv: list[str]) -> dict[str, str]:
    """``{flag: the build's default}`` of the watched flags the argv does not pass (as the
    build's ``--help`` states the default)."""
    passed = {a.split("=", 1)[0].lstrip("-") for a in argv}
    out = {}
    for name in WATCHED_DEFAULTS:
        info = flags.flags.get(name)
        if name in flags.flags and name not in passed:
            default = info.get("default") if isinstance(info, dict) else \
                getattr(info, "default", None)
            out[name] = str(default) if default is not None else "not stated by --help"
    return out


def _per_test(flags: MasterFlags | None) -> dict[str, str]:
    """What a test adds to the profile, by the option it passes."""
    out = {
        "master_cluster(client_ttl=S)": (
            f"--{(flags.client_ttl_flag if flags else None) or 'client_ttl'}=S"),
        "master_cluster(flags={...}, env={...})": "those flags and variables",
        "start_engine(ttl_ms=T)": (f"{REFRESH_ENV}=ceil(T/1000); T=0: {NO_CACHE_ENV}=1 where "
                                   f"the build reads it"),
        "rdma cluster(**config)": "MC_SLICE_SIZE, MC_RETRY_CNT, MC_MAX_EP_PER_CTX, "
                                  "MC_WORKERS_PER_CTX, MC_NUM_QP_PER_EP, MC_MAX_WR, "
                                  "MC_RDMA_RAIL_PAUSE_SECONDS, " + REFRESH_ENV,
    }
    means = means_for(flags.flags) if flags is not None else None
    if means is not None:
        out["master_cluster(snapshots=True)"] = (
            f"{means.describe()}: " + " ".join(
                f"--{k}={'true' if v is True else v}" for k, v in means.settings().items())
            + f", --enable_oplog={'true' if means.oplog else 'false'}")
    return out


class _Placeholder:
    """A cluster's workdir as the record spells it."""

    def __truediv__(self, name: str) -> str:
        return f"<cluster workdir>/{name}"
