"""``python -m reference_engine metadata-server --listen 127.0.0.1:PORT``.

Prints one JSON ready line (``{"event": "ready", "url": ..., "port": ...}``) on stdout once it
accepts requests; SIGTERM or SIGINT stops it cleanly. Listens on loopback only unless
``--allow-non-loopback`` says otherwise: the metadata it serves steers every engine's transfers.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
import threading

from reference_engine.hub import HTTP_LIMITS, add_limit_flags, limits_from
from reference_engine.metadata.http_server import MAX_BODY_BYTES, MetadataHttpServer, parse_listen
from reference_engine.ready_line import print_ready
from reference_engine.stop_signals import stop_on_signals, wait_until_stopped


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reference_engine metadata-server",
                                description="An HTTP metadata server speaking Mooncake's API.")
    p.add_argument("--listen", default="127.0.0.1:8080",
                   help="HOST:PORT to bind (default loopback 127.0.0.1:8080; port 0 = any)")
    p.add_argument("--allow-non-loopback", action="store_true",
                   help="allow --listen on an address other than loopback (127.0.0.0/8, ::1, "
                        "localhost), e.g. 0.0.0.0; off by default: whoever reaches this server "
                        "can redirect every engine's transfers")
    p.add_argument("--path", default="/metadata",
                   help="URL path of the API (default /metadata: http://HOST:PORT/metadata)")
    p.add_argument("--max-body", type=int, default=MAX_BODY_BYTES,
                   help="largest PUT body accepted, bytes (larger: 413)")
    add_limit_flags(p, "", "metadata HTTP", HTTP_LIMITS)
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING or ERROR")
    return p


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        p.error(str(exc))
    if not args.allow_non_loopback and not is_loopback(host):
        p.error(f"--listen {args.listen}: {host} is not a loopback address; pass "
                "--allow-non-loopback to serve metadata to other hosts")
    try:
        server = MetadataHttpServer(host, port, path=args.path, max_body=args.max_body,
                                    limits=limits_from(args, ""))
    except OSError as exc:
        print(f"metadata-server: cannot bind {args.listen}: {exc}", file=sys.stderr)
        return 1
    stopping = threading.Event()
    stop_on_signals(stopping)
    server.start()
    print_ready(url=server.url, port=server.port)
    wait_until_stopped(stopping)
    server.stop()
    return 0
