#!/usr/bin/env python3
"""MP-7 and MP-8 on the master's own wire, per release and reference profile: renders the
verdict table of docs/master-wire.md from the stored report fixtures/reports/master-wire.json
(a run of fixtures/matrices/master-wire.toml with --mc-only=MP-7,MP-8).

    python scripts/master_wire_table.py            # rewrite the table in docs/master-wire.md
    python scripts/master_wire_table.py --check    # exit 1 when the page is stale
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "fixtures" / "reports" / "master-wire.json"
PAGE = ROOT / "docs" / "master-wire.md"
START, END = "<!-- master-wire-table: start -->", "<!-- master-wire-table: end -->"
MESSAGE_LIMIT = 170

OUR_CLIENT = "test_master_wire.py::test_a_hung_leader_never_answers"
WHEEL_CLIENT = "test_clients.py::test_clients_reattach_to_the_new_leader_when_the_old_one_hangs"
WIRE_MP8 = "test_master_wire.py::test_a_client_offering_an_incompatible"
REVISIONS = "test_master_wire.py::test_clients_of_every_protocol_revision"


def tests_of(column: Mapping[str, Any], req: str) -> list[dict[str, Any]]:
    """Every test of ``req`` in ``column``, its judged skew pairs' included."""
    found = list(column["requirements"].get(req, {}).get("tests", []))
    for pair in column.get("pairs", {}).values():
        found += pair.get("requirements", {}).get(req, {}).get("tests", [])
    return found


def said(test: Mapping[str, Any]) -> str:
    """A test's outcome, with the first words of why it did not pass."""
    outcome = {"passed": "pass", "failed": "FAIL", "skipped": "n/a"}.get(test["outcome"],
                                                                        test["outcome"])
    why = test.get("message") or test.get("reason") or ""
    why = re.sub(r"^(Failed|AssertionError): ", "", why.splitlines()[0] if why else "")
    why = why.replace("|", "/")
    if outcome == "pass" or not why:
        return outcome
    return f"{outcome}: {why[:MESSAGE_LIMIT]}{'…' if len(why) > MESSAGE_LIMIT else ''}"


def cell(column: Mapping[str, Any], req: str, needle: str) -> str:
    found = [t for t in tests_of(column, req) if needle in t["nodeid"]]
    return "; ".join(said(t) for t in found) or "not run"


def pairs_cell(column: Mapping[str, Any]) -> str:
    """The judged skew pairs of MP-8 that ran (n/a ones left out), with their verdicts."""
    out = []
    for name, pair in sorted(column.get("pairs", {}).items()):
        verdict = pair.get("requirements", {}).get("MP-8", {}).get("verdict")
        if verdict and verdict != "n/a":
            out.append(f"{name} {verdict}")
    return ", ".join(out) or "none"


def table(report: Mapping[str, Any]) -> str:
    lines = [
        f"Run of {report.get('started', '?')} ({report.get('duration_s', 0) / 60:.0f} min, seed "
        f"{report.get('seed')}), `fixtures/reports/master-wire.json`:",
        "",
        "| column | MP-7 | MP-7, our client (hung leader) | MP-7, the wheel's client (hung "
        "leader) | MP-8 | MP-8 on the wire: incompatible version | MP-8: revisions | MP-8 skew "
        "pairs judged here |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, column in report["columns"].items():
        reqs = column["requirements"]
        lines.append("| " + " | ".join([
            f"`{label}`", reqs.get("MP-7", {}).get("verdict", "not run"),
            cell(column, "MP-7", OUR_CLIENT), cell(column, "MP-7", WHEEL_CLIENT),
            reqs.get("MP-8", {}).get("verdict", "not run"), cell(column, "MP-8", WIRE_MP8),
            cell(column, "MP-8", REVISIONS), pairs_cell(column)]) + " |")
    return "\n".join(lines)


def render(page: str, report: Mapping[str, Any]) -> str:
    if START not in page or END not in page:
        raise SystemExit(f"{PAGE}: the markers {START} … {END} are missing")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(report)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    parser.add_argument("--report", type=Path, default=REPORT,
                        help="the stored report (default fixtures/reports/master-wire.json)")
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    page = PAGE.read_text()
    new = render(page, report)
    if args.check:
        if new != page:
            print(f"{PAGE} is stale: run python scripts/master_wire_table.py")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
