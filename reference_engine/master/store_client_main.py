"""``python -m reference_engine client ...``: a store client process with a control port.

It mounts one segment (an address range it names; no data moves in the reference store) and
keeps it attached to the leader. The control HTTP server (loopback) lets a harness drive it:
GET /status; POST /put {key, size}, /get {key}, /exists {key}, /remove {key}.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reference_engine.master.error_codes import MasterError
from reference_engine.master.master_main import host_port
from reference_engine.master.model import SegmentInfo
from reference_engine.master.protocol import MASTER_VERSION
from reference_engine.master.store_client import StoreClient
from reference_engine.profiles import PROFILES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_engine client",
        description="A store client mounting one segment and following the leader master; a "
                    "loopback HTTP control port drives it (GET /status; POST /put, /get, "
                    "/exists, /remove).",
        epilog="example: python -m reference_engine client --etcd 127.0.0.1:2379 "
               "--cluster-id mc-1 --client-id c0 --control 127.0.0.1:0")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--etcd", metavar="HOST:PORT",
                       help="the etcd the masters elect their leader on")
    where.add_argument("--redis", metavar="HOST:PORT",
                       help="the Redis the masters elect their leader on (masters' --redis)")
    p.add_argument("--cluster-id", required=True,
                   help="the master cluster to follow (the masters' --cluster-id)")
    p.add_argument("--client-id", required=True,
                   help="this client's name; also its segment's name")
    p.add_argument("--control", type=host_port, default=("127.0.0.1", 0), metavar="HOST:PORT",
                   help="address of the control HTTP server (default 127.0.0.1:0, any free "
                        "port; the log line 'control http://...' says which)")
    p.add_argument("--profile", choices=tuple(PROFILES), default="rfc",
                   help="rfc (the RFCs' behaviour, default) or legacy (Mooncake 0.3.13's)")
    p.add_argument("--version", default=MASTER_VERSION, help="protocol version to announce")
    p.add_argument("--segment-size", type=int, default=64 << 20, metavar="BYTES",
                   help="size of the mounted segment (default 64 MiB)")
    p.add_argument("--reattach-timeout", type=float, default=3.0, metavar="S",
                   help="seconds to find the new leader after losing the old one (default 3)")
    p.add_argument("--call-timeout", type=float, default=2.0, metavar="S",
                   help="deadline of one RPC to the master (default 2)")
    p.add_argument("--heartbeat-interval", type=float, default=0.2, metavar="S",
                   help="seconds between heartbeats to the leader (default 0.2)")
    p.add_argument("--stall", type=float, default=121.0,
                   help="legacy: seconds spent waiting on the dead connection before re-resolving")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING, ERROR")
    return p


def status(client: StoreClient) -> dict[str, Any]:
    return {
        "client_id": client.client_id,
        "attached": client.attached,
        "leader": client.leader,
        "remounts": client.stats.remounts,
        "failed_calls": client.stats.failed_calls,
        "last_error": client.stats.last_error,
        "reattaches": [
            {"from": r.from_leader, "to": r.to_leader, "detached_at": r.detached_at,
             "attached_at": r.attached_at, "seconds": r.seconds}
            for r in client.stats.reattaches
        ],
    }


def make_handler(client: StoreClient) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/status":
                self._send(200, status(client))
            else:
                self._send(404, {"error": f"no such endpoint {self.path!r}"})

        def do_POST(self) -> None:  # noqa: N802
            length = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                key = body["key"]
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"error": f"bad request body: {exc}"})
                return
            try:
                if self.path == "/put":
                    result = client.put(key, int(body.get("size", 1)), int(body.get("replica_num", 1)))
                elif self.path == "/get":
                    result = client.get(key)
                elif self.path == "/exists":
                    result = {"exists": client.exists(key)}
                elif self.path == "/remove":
                    result = client.remove(key, bool(body.get("force", False)))
                else:
                    self._send(404, {"error": f"no such endpoint {self.path!r}"})
                    return
                self._send(200, {"ok": True, "result": result})
            except MasterError as exc:
                self._send(200, {"ok": False, "error": exc.code.value, "message": exc.message})

    return Handler


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    base = (zlib.crc32(args.client_id.encode()) + 1) << 32
    segment = SegmentInfo(name=args.client_id, endpoint=f"{args.client_id}@127.0.0.1",
                          base=base, capacity=args.segment_size)
    client = StoreClient(args.etcd or f"redis://{args.redis}", args.cluster_id, args.client_id, profile=args.profile,
                         version=args.version, segment=segment,
                         reattach_timeout=args.reattach_timeout, call_timeout=args.call_timeout,
                         heartbeat_interval=args.heartbeat_interval, stall_seconds=args.stall)
    httpd = ThreadingHTTPServer(args.control, make_handler(client))
    httpd.daemon_threads = True
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client.start()
    server = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    server.start()
    host, port = httpd.server_address[:2]
    logging.getLogger("reference_engine.master.client").info(
        "client %s control http://%s:%d", args.client_id, host, port)
    while not stop.wait(0.5):
        pass
    httpd.shutdown()
    client.close()
    return 0
