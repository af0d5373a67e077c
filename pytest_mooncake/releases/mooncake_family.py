"""The Mooncake family's table: every name the harness relies on, and where each is probed.

One row per master flag, metric, log line, admin endpoint, descriptor field, environment
variable and Python method the Mooncake targets use. Whether a release has it is never written
here: ``facts.ReleaseFacts`` probes it from the release (``--help``, a started master, a started
engine, the ``.so`` files, the Python module), and what was probed on the releases of record is
in ``probed/*.json`` (``python -m pytest_mooncake.releases probe VERSION --record``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROBES: dict[str, str] = {
    "master_flag": "mooncake_master --help (gflags)",
    "metric": "GET /metrics of a started mooncake_master",
    "log_line": "the log of a started mooncake_master",
    "admin_endpoint": "GET on a started master's admin port (404 = absent)",
    "descriptor_field": "the segment descriptor a started TransferEngine publishes (mooncake/ram/SEGMENT)",
    "env_var": "environment variable names stored as strings in the release's ELF files",
    "engine_method": "dir(mooncake.engine.TransferEngine)",
    "store_method": "dir(mooncake.store.MooncakeDistributedStore)",
}
"""Kind of row -> how a release is asked whether it has the row's name."""


@dataclass(frozen=True)
class Row:
    kind: str
    name: str
    use: str


def _rows(kind: str, entries: dict[str, str]) -> tuple[Row, ...]:
    assert kind in PROBES, kind
    return tuple(Row(kind, name, use) for name, use in entries.items())


MASTER_FLAGS = _rows("master_flag", {
    "rpc_port": "the master's RPC port",
    "port": "the RPC port of releases without --rpc_port",
    "rpc_address": "bind the RPC server to loopback",
    "metrics_port": "the admin/metrics HTTP port",
    "metrics_host": "bind the admin/metrics server to loopback (absent: it binds 0.0.0.0)",
    "enable_metric_reporting": "periodic metrics summary in the log",
    "enable_ha": "HA mode (leader election in etcd)",
    "etcd_endpoints": "the etcd of HA mode",
    "cluster_id": "separates clusters sharing one etcd; store clients need MC_STORE_CLUSTER_ID",
    "enable_oplog": "standbys follow the leader through the OpLog",
    "enable_oplog_snapshot": "OpLog snapshots (0.3.14 HA design)",
    "ha_leader_lease_ttl_sec": "the leader's etcd lease TTL",
    "client_active_ttl_sec": "client liveness TTL",
    "client_ttl": "client liveness TTL (older name; an alias where client_active_ttl_sec exists)",
    "default_kv_lease_ttl": "object lease TTL",
    "enable_snapshot": "periodic master snapshots (pre-0.3.14 design)",
    "enable_snapshot_restore": "restore the index from a snapshot at start",
    "snapshot_backup_dir": "where snapshots are written",
    "snapshot_interval_seconds": "snapshot period",
    "snapshot_chunk_object_count": "objects per OpLog snapshot chunk",
    "enable_http_metadata_server": "the master's embedded HTTP metadata server",
    "http_metadata_server_host": "its bind address",
    "http_metadata_server_port": "its port",
})

SNAPSHOT_MEANS: dict[str, tuple[str, ...]] = {
    "snapshot": ("enable_snapshot",),
    "snapshot_restore": ("enable_snapshot_restore",),
    "oplog_snapshot": ("enable_oplog_snapshot",),
}
"""A means of writing or restoring a master snapshot -> the flags it needs, all of them."""

CLIENT_TTL_FLAGS = ("client_active_ttl_sec", "client_ttl")
"""The client TTL flag, preferred first; the config echo names the first the release has."""

METRICS = _rows("metric", {
    "master_key_count": "keys served by the leader",
    "master_active_clients": "store clients alive",
    "ha_oplog_applied_sequence_id": "how far a standby applied the OpLog",
    "ha_oplog_last_sequence_id": "the OpLog's head",
    "ha_oplog_standby_lag": "a standby's lag behind the leader",
    "ha_snapshot_latest_batch": "the newest OpLog snapshot",
})

LOG_PATTERNS: dict[str, re.Pattern[str]] = {
    "version": re.compile(r"Mooncake master version: (?P<value>\S+)"),
    "config_echo": re.compile(r"Master service started on port \d+, (?P<value>.+)$", re.M),
    "admin_started": re.compile(r"Master admin server started on port (?P<value>\d+)"),
}
CLIENT_LOG_PATTERNS: dict[str, re.Pattern[str]] = {
    "version_mismatch": re.compile(r"Version mismatch: server=(?P<server>\S+) client=(?P<client>\S+)"),
}
"""Lines a ``mooncake.store`` client logs: it refuses a master whose ServiceReady version differs
from its own (``master_client.cpp``); the master logs nothing of it."""
LOG_LINES = _rows("log_line", {
    "version": "the master's version line at start",
    "config_echo": "the effective configuration, key=value, at start (checks a flag took effect)",
    "admin_started": "the admin server is up",
})

ADMIN_ENDPOINTS = _rows("admin_endpoint", {
    "/health": "role, ha_state, service_ready (leader election)",
    "/metrics": "Prometheus metrics",
    "/metrics/summary": "one-line summary",
    "/ha_status": "HA state",
    "/role": "leader or standby",
    "/leader": "the current leader's address",
    "/version": "the build's version",
    "/get_all_keys": "keys of the serving leader (503 on a standby)",
    "/get_segments_detail": "mounted segments (MP-10)",
    "/batch_query_keys?keys=probe": "replica endpoints without a read lease",
    "/api/v1/segments/status": "segment drain status",
    "/ha/promotable": "promotability predicate (MP requirement; absent in every release so far)",
    "/promotable": "promotability predicate, alternative path",
    "/api/v1/ha/promotable": "promotability predicate, alternative path",
})

DESCRIPTOR_FIELDS = _rows("descriptor_field", {
    "name": "the segment name",
    "protocol": "tcp or rdma",
    "buffers": "registered memory",
    "tcp_data_host": "where a reader connects (absent: the real reader uses 127.0.0.1)",
    "tcp_data_port": "the TCP transport's data port",
    "tcp_proto_version": "TCP wire protocol version",
    "rdma_server_name": "RDMA handshake name",
    "metadata_version": "descriptor version (stale metadata rejected, 0.3.14)",
    "timestamp": "publication time",
    "instance_id": "process instance identity (RFC; no release has published it so far)",
})

ENV_VARS = _rows("env_var", {
    "MC_TCP_BIND_ADDRESS": "the address the TCP transport binds and publishes",
    "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS": "periodic refresh of cached segment descriptors",
    "MC_DISABLE_METACACHE": "no descriptor cache at all",
    "MC_STORE_CLUSTER_ID": "store clients find the master of this cluster in etcd",
    "MC_METADATA_CLUSTER_ID": "prefix of the engine's metadata keys",
    "MC_FORCE_TCP": "TCP transport even where RDMA devices exist",
})

ENGINE_METHODS = _rows("engine_method", {
    "initialize": "start the engine",
    "register_memory": "register a buffer",
    "transfer_sync_write": "one write",
    "transfer_sync_read": "one read",
    "get_first_buffer_address": "a peer's buffer base",
    "get_rpc_port": "the engine's RPC port",
    "unregister_memory": "deregister",
})

STORE_METHODS = _rows("store_method", {
    "setup": "start a store client", "put": "put", "get": "get", "is_exist": "exists",
    "remove": "remove", "health_check": "client health",
})

TABLE: tuple[Row, ...] = (*MASTER_FLAGS, *METRICS, *LOG_LINES, *ADMIN_ENDPOINTS,
                          *DESCRIPTOR_FIELDS, *ENV_VARS, *ENGINE_METHODS, *STORE_METHODS)
"""Every row, for listing (``python -m pytest_mooncake.releases probe VERSION``)."""

ENV_NAME = re.compile(rb"MC_[A-Z0-9_]{3,}")
"""How an environment variable name looks in a .so (a C string)."""
