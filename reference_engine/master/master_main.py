"""``python -m reference_engine master ...``: one HA store master process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from reference_engine.hub import BINARY_LIMITS, HTTP_LIMITS, add_limit_flags, limits_from
from reference_engine.master.etcd_client import parse_endpoints
from reference_engine.master.redis_client import parse_address
from reference_engine.profiles import PROFILES


def host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r}: expected HOST:PORT")
    return host, int(port)


def redis_address(value: str) -> str:
    try:
        return parse_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reference_engine master",
                                description="A reference Mooncake store master with etcd or Redis HA.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--etcd", help="etcd endpoints, host:port[,host:port]: the leader key, "
                                      "OpLog and handover record live there")
    where.add_argument("--redis", type=redis_address, metavar="HOST:PORT",
                       help="a Redis instead of etcd: the leader hash (Mooncake's "
                            "RedisLeaderCoordinator) and the OpLog (its Redis OpLog backend)")
    p.add_argument("--cluster-id", required=True,
                   help="the HA group: masters with the same id elect one leader on "
                        "--etcd/--redis")
    p.add_argument("--rpc", type=host_port, default=("127.0.0.1", 0), help="RPC listen HOST:PORT")
    p.add_argument("--admin", type=host_port, default=("127.0.0.1", 0), help="admin HTTP HOST:PORT")
    p.add_argument("--profile", choices=tuple(PROFILES), default="rfc",
                   help="rfc (the RFC's promotion safety, default) or legacy (Mooncake 0.3.13's)")
    p.add_argument("--lease-ttl", type=int, default=2, help="leader lease TTL, seconds (etcd lease or Redis PEXPIRE)")
    p.add_argument("--poll-interval", type=float, default=0.1, help="OpLog/election poll, seconds")
    p.add_argument("--client-ttl", type=float, default=10.0, help="client heartbeat TTL, seconds")
    p.add_argument("--kv-lease-ttl", type=float, default=10.0, help="object read lease, seconds")
    p.add_argument("--etcd-timeout", type=float, default=1.0, help="per etcd (or Redis) call, seconds")
    p.add_argument("--write-timeout", type=float, default=5.0,
                   help="how long a write waits to become durable, seconds")
    p.add_argument("--catch-up-timeout", type=float, default=5.0,
                   help="rfc: how long a standby catches up with the OpLog before it judges "
                        "whether it may campaign for leader, seconds (default 5)")
    p.add_argument("--partial-restore", action="store_true",
                   help="rfc: promote dropping invalid entries instead of refusing")
    p.add_argument("--warmup", type=float, default=None,
                   help="legacy: leader warm-up before serving (default: the lease TTL)")
    p.add_argument("--snapshot-dir", default=None,
                   help="where snapshots are written and restored from (default: none)")
    p.add_argument("--snapshot-interval", type=float, default=0.0, help="0 = only on request")
    p.add_argument("--trim-oplog-after-snapshot", action="store_true",
                   help="drop OpLog entries a snapshot covers")
    p.add_argument("--enable-fault-planting", action="store_true",
                   help="allow the plant_raw_entry debug RPC (tests only)")
    p.add_argument("--batch-max-entries", type=int, default=1024,
                   help="OpLog entries per batch a standby reads (default 1024)")
    p.add_argument("--replay-delay", type=float, default=0.0,
                   help="seconds per OpLog batch while a standby builds its baseline (tests)")
    add_limit_flags(p, "rpc-", "RPC port", BINARY_LIMITS)
    add_limit_flags(p, "admin-", "admin HTTP port", HTTP_LIMITS)
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING or ERROR")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    from reference_engine.master.node import MasterConfig, MasterNode

    cfg = MasterConfig(
        etcd=parse_endpoints(args.etcd) if args.etcd else [], redis=args.redis,
        cluster_id=args.cluster_id, rpc=args.rpc,
        admin=args.admin, profile=args.profile, lease_ttl=args.lease_ttl,
        poll_interval=args.poll_interval, client_ttl=args.client_ttl,
        kv_lease_ttl=args.kv_lease_ttl, etcd_timeout=args.etcd_timeout,
        write_timeout=args.write_timeout, catch_up_timeout=args.catch_up_timeout,
        partial_restore=args.partial_restore, warmup=args.warmup,
        snapshot_dir=args.snapshot_dir, snapshot_interval=args.snapshot_interval,
        trim_oplog_after_snapshot=args.trim_oplog_after_snapshot,
        enable_fault_planting=args.enable_fault_planting,
        batch_max_entries=args.batch_max_entries, replay_delay=args.replay_delay,
        rpc_limits=limits_from(args, "rpc-"), admin_limits=limits_from(args, "admin-"),
    )
    node = MasterNode(cfg)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: node.stop())
    runner = threading.Thread(target=node.run, name="master-node")
    runner.start()
    while runner.is_alive():
        runner.join(0.5)
    return 0
