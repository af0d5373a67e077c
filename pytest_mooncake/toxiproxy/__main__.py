"""``python -m pytest_mooncake.toxiproxy`` / ``mc-toxiproxy``: run the fault server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import sys
from pathlib import Path

from pytest_mooncake.toxiproxy import VERSION
from pytest_mooncake.toxiproxy.errors import ApiError
from pytest_mooncake.toxiproxy.http import IDLE_TIMEOUT, READ_TIMEOUT, Timeouts
from pytest_mooncake.toxiproxy.server import ToxiproxyServer

READY_PREFIX = "mc-toxiproxy ready:"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mc-toxiproxy",
        description="A Toxiproxy-compatible TCP fault proxy with Toxiproxy's HTTP API "
                    "(stdlib asyncio; loopback only by default). Prints one line "
                    f"'{READY_PREFIX} url=http://HOST:PORT seed=N' when the API is up; "
                    "stops cleanly on SIGTERM or SIGINT.")
    parser.add_argument(
        "--listen", default="127.0.0.1:8474", metavar="HOST:PORT",
        help="address of the HTTP API (default 127.0.0.1:8474, Toxiproxy's port); port 0 picks "
             "a free port, printed in the ready line")
    parser.add_argument(
        "--seed", type=int, default=None, metavar="INT",
        help="seed for toxicity rolls, latency jitter and slicer sizes, so runs are "
             "reproducible (default: random, printed in the ready line). Real Toxiproxy "
             "cannot be seeded: it discards the generator built from its -seed flag")
    parser.add_argument(
        "--allow-non-loopback", action="store_true",
        help="allow the API and proxies to listen on, and proxies to connect to, addresses "
             "other than loopback (127.0.0.0/8, ::1, localhost). Off by default: the project "
             "only uses 127.0.0.1")
    parser.add_argument(
        "--config", type=Path, metavar="FILE.json",
        help="create the proxies listed in this JSON file (an array of {name, listen, "
             "upstream, enabled}, as for POST /populate) at startup, like Toxiproxy's -config")
    parser.add_argument(
        "--read-timeout", type=_seconds, default=READ_TIMEOUT, metavar="SECONDS",
        help=f"close an API connection whose request body stops arriving for this long "
             f"(default {READ_TIMEOUT:g}, as Toxiproxy's server)")
    parser.add_argument(
        "--idle-timeout", type=_seconds, default=IDLE_TIMEOUT, metavar="SECONDS",
        help=f"close an API connection that sends no complete request head for this long, "
             f"idle or stalled (default {IDLE_TIMEOUT:g})")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the messages written to stderr (default INFO)")
    parser.add_argument("--version", action="version", version=f"mc-toxiproxy {VERSION}",
                        help="print the version (the one GET /version reports) and exit")
    return parser.parse_args(argv)


async def _run(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        print(f"mc-toxiproxy: --listen must be HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
    try:
        server = ToxiproxyServer(host.strip("[]"), int(port), seed, args.allow_non_loopback,
                                 Timeouts(read=args.read_timeout, idle=args.idle_timeout))
        url = await server.start()
    except ApiError as exc:
        print(f"mc-toxiproxy: --listen {args.listen}: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mc-toxiproxy: cannot listen on {args.listen}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    if args.config is not None:
        try:
            await server.populate_file(args.config)
        except (OSError, ValueError) as exc:
            print(f"mc-toxiproxy: --config: {exc}", file=sys.stderr)
            await server.stop()
            return 2
    print(f"{READY_PREFIX} url={url} seed={seed} version={VERSION}", flush=True)
    return await server.serve_until_signal()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
