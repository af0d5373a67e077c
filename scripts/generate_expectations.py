#!/usr/bin/env python3
"""Write the shipped expectations files from the stored release matrix run.

Every column of ``fixtures/reports/releases.json`` becomes
``pytest_mooncake/data/expectations/NAME@PROFILE.toml`` (``mooncake-0.3.13.post1@ha-oplog``,
``reference-rfc@ha-oplog``, ...; today every stored run is of the ``ha-oplog`` profile: HA
masters with the OpLog in etcd), and the two matrices get a ``[columns]`` file each
(``releases``, ``release``). A file that exists is updated as ``--mc-expect-update`` updates it:
its reasons, issue links and verdict sets are kept. A requirement that gets a FAIL or n/a without
a reason gets what the run saw as its reason (the failing test's message, the means it lacked).

    python scripts/generate_expectations.py            # rewrite from the stored reports
    python scripts/generate_expectations.py --check    # exit 1 when a file would change
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
from pytest_mooncake.schemas.shipped_files import shipped_dir  # noqa: E402

PROFILE = "ha-oplog"
RELEASES = ROOT / "fixtures" / "reports" / "releases.json"
RELEASE = ROOT / "fixtures" / "reports" / "release.json"
OUT = shipped_dir("expectations")
REASON_LIMIT = 200


def file_name(column: Column) -> str:
    """``mooncake-0.3.13.post1@ha-oplog`` from the column's version (whatever wheel flavour),
    ``reference-rfc@ha-oplog`` for the reference engine's profiles."""
    if column.version.startswith("reference-engine"):
        profile = "legacy" if column.label.endswith(":legacy") else "rfc"
        return f"reference-{profile}@{PROFILE}"
    return f"mooncake-{column.version.split()[-1]}@{PROFILE}"


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


def header(column: Column, source: Path) -> str:
    return (f"# Expected verdicts of {column.version} ({PROFILE} profile: HA masters, OpLog in "
            f"etcd),\n# from the stored run {source.relative_to(ROOT)} (column {column.label!r}).\n"
            f"# Written by scripts/generate_expectations.py, kept by --mc-expect-update; the "
            f"format is docs/ci.md's.\n")


def documents() -> dict[Path, str]:
    order = load_catalogue().order
    out: dict[Path, str] = {}
    matrices: dict[str, dict[str, str]] = {}
    for source, matrix in ((RELEASES, "releases"), (RELEASE, "release")):
        for label, column in columns(read_report(source)).items():
            name = file_name(column)
            matrices.setdefault(matrix, {})[label] = name
            path = OUT / f"{name}.toml"
            if path in out:
                continue  # the releases matrix's column wins over the single release run's
            old = load_expectations(str(path)).single if path.is_file() else None
            doc = updated_document(column, old, PROFILE, order)
            for req, value in doc["requirements"].items():
                if column.verdict(req) in ("FAIL", "n/a", "error") and (
                        isinstance(value, str) or not value.get("reason")):
                    reason = seen(column, req)
                    if reason:
                        value = value if isinstance(value, dict) else {"verdict": value}
                        doc["requirements"][req] = {"verdict": value["verdict"],
                                                    "reason": reason,
                                                    **{k: v for k, v in value.items()
                                                       if k not in ("verdict", "reason")}}
            out[path] = (leading_comments(path) or header(column, source)) + tomli_w.dumps(doc)
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
