#!/usr/bin/env python3
"""Write the shipped expectations files from the stored release matrix run and the later runs.

Every column of ``fixtures/reports/releases.json`` becomes
``pytest_mooncake/data/expectations/NAME@PROFILE.toml`` (``mooncake-0.3.13.post1@ha-oplog``,
``reference-rfc@ha-oplog``, ...; today every stored run is of the ``ha-oplog`` profile: HA
masters with the OpLog in etcd), and the two matrices get a ``[columns]`` file each
(``releases``, ``release``). A file that exists is updated as ``--mc-expect-update`` updates it:
its reasons, issue links and verdict sets are kept. A requirement that gets a FAIL or n/a without
a reason gets what the run saw as its reason (the failing test's message, the means it lacked).

Later, narrower stored runs (``LATER_RUNS``: the profiles run, the RDMA explorations, ...)
judged some requirements again, some with tests the matrix run did not have yet. They overlay
the matrix run's results for the same build, profile and backends, oldest first, requirement by
requirement (``overlay``): a later run that ran every test the earlier one had for a
requirement replaces its verdict; one that ran some of them replaces those tests' outcomes and
the verdict rule judges the union. Each file's header names the runs it was written from.

    python scripts/generate_expectations.py            # rewrite from the stored reports
    python scripts/generate_expectations.py --check    # exit 1 when a file would change
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tomli_w  # noqa: E402

from pytest_mooncake.report.catalogue import load_catalogue  # noqa: E402
from pytest_mooncake.report.expectation_update import (  # noqa: E402
    leading_comments,
    updated_document,
)
from pytest_mooncake.report.expectations import load_expectations  # noqa: E402
from pytest_mooncake.report.report_columns import Column, columns, read_report  # noqa: E402
from pytest_mooncake.report.verdict_rule import VERDICT_INTERMITTENT, verdict  # noqa: E402
from pytest_mooncake.schemas.shipped_files import shipped_dir  # noqa: E402

PROFILE = "ha-oplog"
RELEASES = ROOT / "fixtures" / "reports" / "releases.json"
RELEASE = ROOT / "fixtures" / "reports" / "release.json"
PROFILES_RUN = ROOT / "fixtures" / "reports" / "profiles.json"
"""Both deployment profiles of 0.3.13.post1 and 0.3.14 on the master requirements."""
LATER_RUNS = [ROOT / "fixtures" / "reports" / name for name in (
    "profiles.json",            # 0.3.13.post1 / 0.3.14, both profiles, MP-4 and MP-6
    "release-profiles.json",    # the release matrix with re-runs: 0.3.13.post1, both profiles
    "rdma-exploration.json",    # suites/rdma explored at the verbs boundary, 0.3.13.post1/0.3.14
    "releases-master.json",     # MP-4/MP-6 (suites/master) of every release, both profiles
    "master-wire.json",         # MP-7/MP-8 through the master's own wire
    "co3-mr12-0.3.11.json",     # CO-3 judged on resources only, MR-12's QP-fatal retry: 0.3.11
    "stability/proof-b677053/mooncake_0.3.13.post1_defaults-seed1101.json",  # @defaults, whole
    "stability/proof-b677053/mooncake-cuda13_0.3.14_defaults-seed1101.json",  # suites, b677053
    "mr17-restart-gap.json",    # MR-17's writer restarted after the reader missed it: 0.3.13/14
    "mp6-edges.json",           # MP-6's new edges (freed memory, writes acknowledged at the crash)
    "edges-sixth-sitting.json",  # #29's sixth sitting: MP-2/MR-8/MR-18/CO-3/CO-5/CO-8 new tests
    "co3-notify-cq-0.3.14.json",  # CO-3's CQ test on 0.3.14 with the overrun it saw named
    "co3-notify-cq-0.3.14-defaults.json",  # the same under 0.3.14's own defaults
)]
"""Stored runs after the matrix run, overlaid on it in the order they started."""
ETCD_BACKENDS = {"metadata": "etcd", "ha": "etcd"}
DEFAULTS = "defaults"
OUT = shipped_dir("expectations")
REASON_LIMIT = 200


def file_name(column: Column, profile: str = PROFILE) -> str:
    """``mooncake-0.3.13.post1@ha-oplog`` from the column's version (whatever wheel flavour)
    and deployment profile, ``reference-rfc@ha-oplog`` for the reference engine's profiles."""
    if column.version.startswith("reference-engine"):
        variant = "legacy" if column.label.endswith(":legacy") else "rfc"
        return f"reference-{variant}@{PROFILE}"
    return f"mooncake-{column.version.split()[-1]}@{profile}"


def seen(column: Column, req: str) -> str:
    """What the run saw: the first failing test's message, or the means an n/a lacked."""
    for t in column.requirements[req]["tests"]:
        text = t.get("message") if t["outcome"] in ("failed", "error") else None
        text = text or (t.get("reason") if column.verdict(req) == "n/a" else None)
        if text:
            text = " ".join(text.split())
            return "seen: " + (text if len(text) <= REASON_LIMIT
                               else text[:REASON_LIMIT - 3] + "...")
    return ""


def header(column: Column, source: Path, profile: str = PROFILE,
           runs: tuple[str, ...] = ()) -> str:
    later = (f"# laid over by the later runs of the same build and profile: {', '.join(runs)}.\n"
             if runs else "")
    if profile != PROFILE:
        return (f"# Expected verdicts of {column.version} deployed @{profile} (HA masters on "
                f"etcd, no --enable_oplog),\n# from {source.relative_to(ROOT)} (column "
                f"{column.label.split('@')[0]!r}: the same build; profiles differ in master "
                f"flags only),\n{later}# Written by scripts/generate_expectations.py, kept by "
                f"--mc-expect-update; the format is docs/ci.md's.\n")
    return (f"# Expected verdicts of {column.version} ({PROFILE} profile: HA masters, OpLog in "
            f"etcd),\n# from the stored run {source.relative_to(ROOT)} (column {column.label!r}),\n"
            f"{later}# Written by scripts/generate_expectations.py, kept by --mc-expect-update; "
            f"the format is docs/ci.md's.\n")


GENERATED_HEADER = "# Expected verdicts of "
"""How this script's own header starts: replaced on each write; other leading comments stay."""


def column_profile(column: Column) -> str:
    """The deployment profile a column was judged under (the matrix run's is ``ha-oplog``)."""
    profile = (column.document.get("deployment") or {}).get("profile") or {}
    if isinstance(profile, dict) and profile.get("name"):
        return str(profile["name"])
    return DEFAULTS if column.label.endswith(f"@{DEFAULTS}") else PROFILE


def on_etcd(column: Column) -> bool:
    backends = (column.document.get("deployment") or {}).get("backends") or ETCD_BACKENDS
    return dict(backends) == ETCD_BACKENDS


def overlay(base: Mapping[str, Any], later: Mapping[str, Any],
            proxies: set[str] | None = None) -> dict[str, Any]:
    """``base``'s requirements with ``later``'s laid over them (both ``{REQ: {"verdict",
    "tests", ...}}``): see the module's docstring. ``proxies``: requirements whose base results
    were judged under another profile (a ``@defaults`` file starts from the ``ha-oplog`` run):
    the first run of the file's own profile replaces them whole, and they leave the set."""
    out = dict(base)
    proxies = set() if proxies is None else proxies
    for req, entry in later.items():
        old = out.get(req)
        if entry.get("verdict") is None:
            continue
        if old is None or req in proxies:
            out[req] = entry
            proxies.discard(req)
            continue
        ids = {t["nodeid"] for t in entry.get("tests", [])}
        kept = [t for t in old.get("tests", []) if t["nodeid"] not in ids]
        if not kept:
            out[req] = entry
            continue
        tests = kept + list(entry.get("tests", []))
        got = verdict(t["outcome"] for t in tests)
        if entry["verdict"] == VERDICT_INTERMITTENT and got != "FAIL":
            got = VERDICT_INTERMITTENT
        out[req] = {**entry, "verdict": got, "tests": tests}
    return out


def later_columns() -> list[tuple[str, Column, str]]:
    """(expectations file name, column, run's file) of every later run's column on etcd, oldest
    run first."""
    runs = []
    for path in LATER_RUNS:
        if path.is_file():
            report = read_report(path)
            runs.append((str(report.get("started", "")), path, report))
    out = []
    for _, path, report in sorted(runs, key=lambda r: r[0]):
        for column in columns(report).values():
            if on_etcd(column):
                out.append((file_name(column, column_profile(column)), column,
                            str(path.relative_to(ROOT))))
    return out


def profiled_columns(source: Path) -> list[tuple[str, Column, str, tuple[str, ...]]]:
    """(label, column, profile, later runs used) of a stored report, plus, for each release column of the
    default profile, its ``@defaults`` column, each with the later runs of the same build and
    profile laid over it. A ``@defaults`` column starts from the matrix run's results (the
    profiles differ only in master flags; on 0.3.10-0.3.12 not even there)."""
    found = columns(read_report(source))
    later = later_columns()
    out = []
    for label, column in found.items():
        variants = [(label, PROFILE)]
        spec = label if "==" in label or label.startswith("mooncake") else ""
        if spec and not column.version.startswith("reference-engine"):
            variants.append((f"{label}@{DEFAULTS}", DEFAULTS))
        for name, profile in variants:
            reqs: Mapping[str, Any] = column.requirements
            proxies = set(reqs) if profile != PROFILE else set()
            pairs = {pair: dict(cells) for pair, cells in column.pairs.items()}
            used = []
            for other_name, other, run in later:
                if other_name == file_name(column, profile):
                    reqs = overlay(reqs, other.requirements, proxies)
                    for pair, cells in other.pairs.items():  # a later run's skew cell wins
                        pairs.setdefault(pair, {}).update(
                            {req: cell for req, cell in cells.items()
                             if cell.get("verdict") is not None})
                    used.append(run)
            merged = Column(name, column.version, column.seed, reqs, pairs)
            out.append((name, merged, profile, tuple(dict.fromkeys(used))))
    return out


def requirement_entry(value: str | dict[str, Any], verdict: str,
                      expected_before: tuple[str, ...] | None,
                      seen_reason: Callable[[], str]) -> str | dict[str, Any]:
    """A requirement's entry as written: the reason of a verdict the runs no longer give is
    dropped (an entry left with its verdict alone is written inline, as a new one is, so a
    second run writes the same file); a FAIL, n/a or error without a reason gets what the run
    saw."""
    if expected_before and verdict not in expected_before and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "reason"}
        if set(value) == {"verdict"}:
            value = value["verdict"]
    if verdict in ("FAIL", "n/a", "error") and (
            isinstance(value, str) or not value.get("reason")):
        reason = seen_reason()
        if reason:
            value = value if isinstance(value, dict) else {"verdict": value}
            value = {"verdict": value["verdict"], "reason": reason,
                     **{k: v for k, v in value.items() if k not in ("verdict", "reason")}}
    return value


def documents() -> dict[Path, str]:
    order = load_catalogue().order
    out: dict[Path, str] = {}
    matrices: dict[str, dict[str, str]] = {}
    for source, matrix in ((RELEASES, "releases"), (RELEASE, "release")):
        for label, column, profile, runs in profiled_columns(source):
            name = file_name(column, profile)
            matrices.setdefault(matrix, {})[label] = name
            path = OUT / f"{name}.toml"
            if path in out:
                continue  # the releases matrix's column wins over the single release run's
            old = load_expectations(str(path)).single if path.is_file() else None
            doc = updated_document(column, old, profile, order)
            for req, value in list(doc["requirements"].items()):
                before = old.requirements.get(req) if old else None
                doc["requirements"][req] = requirement_entry(
                    value, column.verdict(req), before.verdicts if before else None,
                    lambda req=req, column=column: seen(column, req))
            kept = leading_comments(path)
            if not kept or kept.startswith(GENERATED_HEADER):
                kept = header(column, source, profile, runs) + "\n"
            out[path] = kept + tomli_w.dumps(doc)
    for matrix, by_label in matrices.items():
        out[OUT / f"{matrix}.toml"] = (
            f"# The {matrix} matrix (--mc-matrix={matrix}): each column's expectations file.\n"
            f"#   pytest -p pytest_mooncake suites/ --mc-matrix={matrix} --mc-expect={matrix}\n\n"
            + tomli_w.dumps({"columns": by_label}))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a shipped file differs from what would be written")
    args = parser.parse_args(argv)
    stale = []
    for path, text in documents().items():
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    verb = "stale" if args.check else "written"
    for path in stale:
        print(f"{verb}: {path.relative_to(ROOT)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
