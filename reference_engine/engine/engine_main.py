"""``python -m reference_engine engine --name SEG --metadata URI --protocol tcp ...``.

Starts an engine, publishes its segment, then prints one ready line on stdout::

    {"event": "ready", "segment": ..., "control_port": ..., "data_port": ...,
     "instance_id": ..., "buffers": [[addr, length]], "pid": ..., "profile": ...}

and serves the control channel (see ``control``) until ``stop``, SIGTERM or SIGINT. Exit code 0
after a clean stop, 1 when the engine could not start (the reason on stderr).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

from reference_engine.engine.control import MAX_REQUEST, ControlServer, Dispatcher, max_transfer
from reference_engine.engine.core import Engine
from reference_engine.hub import BINARY_LIMITS, add_limit_flags, limits_from
from reference_engine.metadata import MetadataUriError, open_store, parse_uri
from reference_engine.metadata.handshake_store import HandshakeStore
from reference_engine.profiles import PROFILES, get_profile
from reference_engine.ready_line import print_ready
from reference_engine.stop_signals import stop_on_signals, wait_until_stopped
from reference_engine.transport import TcpTransport


def _int(text: str) -> int:
    return int(text, 0)


def _request_size(text: str) -> int:
    value = _int(text)
    if value < 64 << 10:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 65536 bytes")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_engine engine",
        description="A transfer-engine process: publishes one segment's descriptor in the "
                    "metadata store and serves transfers into its buffer over TCP; a loopback "
                    "control port drives it (write, read, lookup, stats, ...).",
        epilog="example: python -m reference_engine engine --name seg-a "
               "--metadata 127.0.0.1:2379 --ttl-ms 200")
    p.add_argument("--name", required=True,
                   help="segment name; with P2PHANDSHAKE metadata host[:port], the address the "
                        "handshake daemon listens on (no port or 0: any free one), and the "
                        "segment name is host:port")
    p.add_argument("--metadata", required=True,
                   help="etcd://h:p[;h:p], h:p (etcd), redis://h:p, http://h:p/metadata or "
                        "P2PHANDSHAKE (no store: peers ask each other)")
    p.add_argument("--protocol", default="tcp", choices=["tcp"],
                   help="transport of the data path (tcp; RDMA runs in the simulator)")
    p.add_argument("--profile", default="rfc", choices=sorted(PROFILES),
                   help="rfc (the RFCs' behaviour, default) or legacy (Mooncake 0.3.13's)")
    p.add_argument("--ttl-ms", type=float, default=None, help="metadata_cache_ttl_ms")
    p.add_argument("--buffer-size", type=_int, default=4 << 20, metavar="BYTES",
                   help="size of the registered buffer (default 4 MiB; 0x.. accepted)")
    p.add_argument("--fixed-address", type=_int, default=None,
                   help="map the buffer at this address (a restart that keeps addresses)")
    p.add_argument("--data-port", type=int, default=0, help="TCP data port (0 = any)")
    p.add_argument("--host", default="127.0.0.1", help="data and control bind address")
    p.add_argument("--control-port", type=int, default=0,
                   help="control port on --host (0 = any; the log says which)")
    add_limit_flags(p, "data-", "data port", BINARY_LIMITS)
    add_limit_flags(p, "control-", "control port", BINARY_LIMITS)
    p.add_argument("--control-max-request", type=_request_size, default=MAX_REQUEST,
                   metavar="BYTES",
                   help="longest control request line; longer ones are refused as soon as that "
                        "many bytes arrived. One write or read through the control channel "
                        "moves at most 3/4 of it less 64 KiB (its data travels as base64) "
                        f"(default {MAX_REQUEST}: 12 MiB transfers)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING or ERROR")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("reference_engine.engine")
    try:
        if parse_uri(args.metadata).kind == "p2p":
            store = HandshakeStore(args.name)
            args.name = store.segment_name
        else:
            store = open_store(args.metadata)
        transport = TcpTransport(args.host, args.data_port, limits=limits_from(args, "data-"))
        engine = Engine(args.name, store, get_profile(args.profile), ttl_ms=args.ttl_ms,
                        buffer_size=args.buffer_size, fixed_address=args.fixed_address,
                        data_host=args.host, data_port=args.data_port, transport=transport)
        desc = engine.start()
    except (MetadataUriError, OSError, ValueError) as exc:
        print(f"engine {args.name}: cannot start: {exc}", file=sys.stderr, flush=True)
        return 1

    stopped = threading.Event()
    try:
        control = ControlServer(
            Dispatcher(engine, stopped.set, max_transfer(args.control_max_request)), args.host,
            args.control_port, limits_from(args, "control-"), args.control_max_request)
    except OSError as exc:
        print(f"engine {args.name}: cannot listen for control on {args.host}:"
              f"{args.control_port}: {exc}", file=sys.stderr, flush=True)
        engine.stop()
        return 1
    stop_on_signals(stopped)
    print_ready(segment=args.name, control_port=control.port, data_port=desc.tcp_data_port,
                instance_id=desc.instance_id,
                buffers=[[engine.region.addr, engine.region.length]], pid=os.getpid(),
                profile=args.profile)
    wait_until_stopped(stopped)
    log.info("stopping segment %s", args.name)
    control.stop()
    engine.stop()
    return 0
