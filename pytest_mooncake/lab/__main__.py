"""``python -m pytest_mooncake.lab up|down|status``: a multi-node Mooncake lab on this machine.

    python -m pytest_mooncake.lab up --nodes 3 [--mooncake reference] [--name lab]
    python -m pytest_mooncake.lab status [--name lab]
    python -m pytest_mooncake.lab down [--name lab | --all]

``up`` prints the cluster file's path last on stdout (progress goes to stderr), so
``FILE=$(python -m pytest_mooncake.lab up --nodes 3)`` works in a script.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from pytest_mooncake.lab import netns_lab as labs
from pytest_mooncake.lab.host import LabError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_mooncake.lab",
                                description="Mooncake nodes as network namespaces with an sshd "
                                            "each, on this machine (needs root).")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build a lab and start etcd, masters and engines on it")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--name", default="lab", help="lab name, 1-6 of [a-z0-9] (default lab)")
    up.add_argument("--mooncake", default="reference", metavar="VERSION|reference",
                    help="what runs on the nodes: reference (default; reference:legacy for the "
                         "legacy profile) or a Mooncake release, e.g. 0.3.13.post1 or "
                         "mooncake-cuda13==0.3.14 (installed into its cached environment on "
                         "first use)")
    up.add_argument("--masters", type=int, default=None, help="masters (default min(2, nodes))")
    up.add_argument("--etcd", type=int, default=1, help="etcd members (default 1)")
    up.add_argument("--no-engines", action="store_true", help="describe and start no engines")
    up.add_argument("--no-clients", action="store_true", help="start no store clients")
    for name, text in (("down", "remove a lab: processes, namespaces, links, rules, files"),
                       ("status", "show what exists of a lab")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--name", default=None, help="lab name (default: lab)")
        s.add_argument("--all", action="store_true", help="every lab on this host")
    return p


def _names(args: argparse.Namespace) -> list[str]:
    if args.all:
        return labs.known_labs()
    return [args.name or "lab"]


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # a killed `up` cleans up like Ctrl-C
    try:
        if args.command == "up":
            lab = labs.Lab.up(nodes=args.nodes, name=args.name, flavour=args.mooncake,
                              masters=args.masters, etcd=args.etcd, engines=not args.no_engines,
                              clients=not args.no_clients)
            if lab.fleet is not None:
                lab.fleet.close(heal=False)
            print(lab.cluster_file)
            return 0
        if args.command == "down":
            problems = [p for name in _names(args) for p in labs.down(name)]
            for p in problems:
                print(f"lab down: {p}", file=sys.stderr)
            return 1 if problems else 0
        out = [labs.status(name) for name in _names(args)]
        print(json.dumps(out if args.all else out[0], indent=1))
        return 0
    except (LabError, ValueError) as exc:
        print(f"lab {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
