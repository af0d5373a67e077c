"""``python -m reference_engine metadata-server --listen 127.0.0.1:PORT``.

Prints one JSON ready line (``{"event": "ready", "url": ..., "port": ...}``) on stdout once it
accepts requests; SIGTERM or SIGINT stops it cleanly.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from reference_engine.metadata.http_server import MAX_BODY_BYTES, MetadataHttpServer, parse_listen


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_engine metadata-server")
    parser.add_argument("--listen", default="127.0.0.1:8080",
                        help="HOST:PORT to bind (default loopback 127.0.0.1:8080; port 0 = any)")
    parser.add_argument("--path", default="/metadata")
    parser.add_argument("--max-body", type=int, default=MAX_BODY_BYTES,
                        help="largest PUT body accepted, bytes (larger: 413)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        server = MetadataHttpServer(host, port, path=args.path, max_body=args.max_body)
    except OSError as exc:
        print(f"metadata-server: cannot bind {args.listen}: {exc}", file=sys.stderr)
        return 1

    def stop(signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(json.dumps({"event": "ready", "url": server.url, "port": server.port}), flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
