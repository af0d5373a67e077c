"""``python -m pytest_mooncake.cluster heal|faults|check FILE``.

    heal FILE     undo every fault in FILE's ledger that is not healed (partitions removed,
                  paused components resumed, stopped ones started), then sweep each node for
                  rules of ours the ledger does not know (--no-sweep to skip); exit 1 if
                  anything could not be undone
    faults FILE   list the ledger (outstanding faults; --all for every one)
    check FILE    reach every node over SSH; show its firewall tools and its components' state
"""

from __future__ import annotations

import argparse
import sys

from pytest_mooncake.nodes import Fleet, ManifestError, NodeError
from pytest_mooncake.nodes.ledger import LedgerError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_mooncake.cluster",
                                description="Operator commands on a cluster file's nodes.")
    sub = p.add_subparsers(dest="command", required=True)
    heal = sub.add_parser("heal", help="undo what a killed run left behind")
    heal.add_argument("file", help="the cluster file (TOML with [[nodes]])")
    heal.add_argument("--no-sweep", action="store_true",
                      help="only the ledger's faults, no sweep of our rules on each node")
    faults = sub.add_parser("faults", help="list the fault ledger")
    faults.add_argument("file", help="the cluster file (TOML with [[nodes]])")
    faults.add_argument("--all", action="store_true", help="healed faults too")
    check = sub.add_parser("check", help="reach every node; tools and component states")
    check.add_argument("file", help="the cluster file (TOML with [[nodes]])")
    return p


def _heal(fleet: Fleet, sweep: bool) -> int:
    outcomes = fleet.faults.heal_all(run=None)
    for o in outcomes:
        mark = "healed" if o.ok else "NOT HEALED"
        print(f"{mark} {o.entry.id} ({o.entry.fault.get('kind')} from run {o.entry.run}): {o.what}")
    if not outcomes:
        print(f"ledger {fleet.ledger.path}: nothing outstanding")
    if sweep:
        for line in fleet.faults.sweep():
            print(f"sweep {line}")
    left = fleet.ledger.outstanding()
    if left:
        print(f"{len(left)} fault(s) still outstanding; see above, fix, run heal again",
              file=sys.stderr)
        return 1
    return 0


def _faults(fleet: Fleet, every: bool) -> int:
    entries = fleet.ledger.entries() if every else fleet.ledger.outstanding()
    for e in entries:
        print(f"{e.id} {e.state:12} run={e.run} {e.fault}" + (f" note={e.note}" if e.note else ""))
    if not entries:
        print(f"ledger {fleet.ledger.path}: {'empty' if every else 'nothing outstanding'}")
    return 0


def _check(fleet: Fleet) -> int:
    bad = 0
    for name, node in fleet.nodes.items():
        try:
            tools, came_from = fleet.faults.tools(name)
            print(f"{node.spec.describe()}: reachable (we come from {came_from or '?'}); "
                  f"firewall tools: {', '.join(tools) or 'none'}")
            for comp in sorted(node.components):
                print(f"  {comp}: {node.state(comp)}")
        except NodeError as exc:
            bad += 1
            print(f"{node.spec.describe()}: {exc}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        fleet = Fleet.from_file(args.file, run=f"cluster-cli-{args.command}")
    except ManifestError as exc:
        print(f"cluster {args.command}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "heal":
            return _heal(fleet, not args.no_sweep)
        if args.command == "faults":
            return _faults(fleet, args.all)
        return _check(fleet)
    except LedgerError as exc:
        print(f"cluster {args.command}: {exc}", file=sys.stderr)
        return 2
    finally:
        fleet.close(heal=False)


if __name__ == "__main__":
    sys.exit(main())
