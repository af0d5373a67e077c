#!/usr/bin/env python3
"""The RFCs' own measurements, reproduced: writes docs/rfc-claims.md from the stored reports.

``fixtures/rfc-claims.toml`` maps each measured claim the three RFCs make about Mooncake 0.3.13
to the suite tests that reproduce it; the reports it names (``fixtures/reports/*.json``) hold
each test's outcome per release and deployment profile. A claim is *reproduced* in a column
where one of its tests FAILed (and the message matches the claim's ``seen``), *not reproduced*
where they passed, and the page says under which flags (the column's deployment profile).

    python scripts/rfc_claims.py            # rewrite docs/rfc-claims.md
    python scripts/rfc_claims.py --check    # exit 1 when the page is stale
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pytest_mooncake.report.profile_differences import phrase  # noqa: E402
from pytest_mooncake.report.report_columns import column_free_id  # noqa: E402
from pytest_mooncake.schemas.toml_documents import tomllib  # noqa: E402

CLAIMS = ROOT / "fixtures" / "rfc-claims.toml"
PAGE = ROOT / "docs" / "rfc-claims.md"
FOCUS = "0.3.13"
"""The release the RFCs measured: its columns decide the agreement column."""
DEFAULT_DEPLOYMENT = {"profile": {"name": "ha-oplog", "in_one_line": "--enable_oplog=true"}}
"""What a column of a report written before deployments were recorded ran with."""
REPRODUCES, NOT, OTHERWISE, NA, ERROR, NOT_RUN = (
    "reproduces", "does not reproduce", "fails otherwise", "n/a", "error", "not run")
MESSAGE_LIMIT = 200


@dataclass(frozen=True)
class Column:
    label: str
    release: str
    deployment: Mapping[str, Any]

    @property
    def profile(self) -> str:
        return self.deployment["profile"]["name"]

    @property
    def heading(self) -> str:
        return f"{self.release} {self.profile}"


def load_claims(path: Path = CLAIMS) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def columns_of(doc: Mapping[str, Any]) -> list[Column]:
    """The build columns of a report (the reference engine's are left out)."""
    out = []
    for label, col in (doc.get("columns") or {}).items():
        if label.startswith("reference"):
            continue
        base = label.split("@", 1)[0]
        out.append(Column(label, base.rpartition("==")[2] or base,
                          col.get("deployment") or DEFAULT_DEPLOYMENT))
    return out


def _tests(doc: Mapping[str, Any], label: str, pair: str | None) -> list[Mapping[str, Any]]:
    holder = doc["columns"][label]
    if pair is not None:
        holder = (holder.get("pairs") or {}).get(pair) or {}
    seen: dict[str, Mapping[str, Any]] = {}
    for entry in (holder.get("requirements") or {}).values():
        for test in entry["tests"]:
            seen[test["nodeid"]] = test
    return list(seen.values())


def matches(nodeid: str, wanted: str) -> bool:
    """Whether a report's ``nodeid`` (``path::name[COLUMN-params]``) is the claim's ``wanted``
    (``path::name``, or ``path::name[PARAM]`` for one parametrisation)."""
    name, _, params = nodeid.partition("[")
    want, _, want_param = wanted.partition("[")
    if name != want:
        return False
    params = params.rstrip("]")
    return not want_param or params.endswith("-" + want_param.rstrip("]")) or \
        params == want_param.rstrip("]")


def outcome(claim: Mapping[str, Any], tests: list[Mapping[str, Any]]) -> tuple[str, str]:
    """(cell, the message that decided it) of one claim over one column's matching tests."""
    if not tests:
        return NOT_RUN, ""
    seen = re.compile(claim["seen"]) if claim.get("seen") else None
    found = {}
    for test in tests:
        message = test.get("message") or test.get("reason") or ""
        if test["outcome"] == "failed":
            found.setdefault(REPRODUCES if seen is None or seen.search(message) else OTHERWISE,
                             message)
        elif test["outcome"] == "passed":
            found.setdefault(NOT, "")
        elif test["outcome"] == "skipped":
            found.setdefault(NA, message)
        else:
            found.setdefault(ERROR, message)
    for verdict in (REPRODUCES, OTHERWISE, NOT, ERROR, NA):
        if verdict in found:
            return verdict, found[verdict]
    return NOT_RUN, ""


def judge(claims: Mapping[str, Any], reports: list[Mapping[str, Any]]) -> tuple[
        list[Column], dict[str, dict[str, tuple[str, str]]]]:
    """Every column of the reports (first report wins for a label) and, per claim id and column
    label, its cell and deciding message, from each of the claim's tests as the first report
    that ran it saw it."""
    columns: dict[str, Column] = {}
    for doc in reports:
        for column in columns_of(doc):
            columns.setdefault(column.label, column)
    cells: dict[str, dict[str, tuple[str, str]]] = {}
    for claim in claims["claim"]:
        row = cells.setdefault(claim["id"], {})
        for label in columns:
            # test by test, the first report that ran a test wins for it (a newer focused run
            # may have run one of a claim's tests and not the others)
            chosen: dict[str, Mapping[str, Any]] = {}
            for doc in reports:
                if label not in (doc.get("columns") or {}):
                    continue
                for t in _tests(doc, label, claim.get("pair")):
                    if any(matches(t["nodeid"], w) for w in claim["tests"]):
                        chosen.setdefault(column_free_id(t["nodeid"], label), t)
            row[label] = outcome(claim, list(chosen.values()))
    ordered = sorted(columns.values(), key=lambda c: (_version_key(c.release), c.profile))
    return ordered, cells


def _version_key(release: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", release))


def agreement(claim: Mapping[str, Any], columns: list[Column],
              row: Mapping[str, tuple[str, str]]) -> str:
    """The agreement column: on the RFC's release, which profiles reproduce the claim."""
    if not claim["tests"]:
        return "not tested"
    by: dict[str, list[str]] = {}
    for column in columns:
        if column.release.startswith(FOCUS):
            verdict = row[column.label][0]
            if claim.get("scope") == "engine" and verdict == NOT_RUN:
                continue  # a profile's master flags do not touch an engine-only claim
            by.setdefault(verdict, []).append(flags_of(claim, column))
    parts = []
    own = test_settings(claim, columns)
    # an engine-only claim reads the same phrase in every profile's column: name it once
    if REPRODUCES in by:
        parts.append("agrees with " + ", ".join(dict.fromkeys(by[REPRODUCES])))
    if NOT in by:
        parts.append("does not reproduce with " + ", ".join(dict.fromkeys(by[NOT])))
    for verdict in (OTHERWISE, ERROR, NA, NOT_RUN):
        if verdict in by:
            parts.append(f"{verdict} with " + ", ".join(dict.fromkeys(by[verdict])))
    text = "; ".join(parts) or "not run"
    return f"{text} (the test sets its own: {own})" if own else text


def flags_of(claim: Mapping[str, Any], column: Column) -> str:
    """Under which flags a column judged the claim: its profile, or for an engine-only claim
    (``scope = "engine"``) the release alone (master flags do not touch it)."""
    if claim.get("scope") == "engine":
        return "engines as the suites start them (no master involved)"
    return phrase(column.deployment)


def test_settings(claim: Mapping[str, Any], columns: list[Column]) -> str:
    """What the claim's test adds to every profile (``option`` of the claim), as the first
    column on the RFC's release recorded it (``deployment.per_test``)."""
    option = claim.get("option")
    if not option:
        return ""
    for column in columns:
        said = (column.deployment.get("per_test") or {}).get(option)
        if column.release.startswith(FOCUS) and said:
            return f"{option}: {said}"
    return option


def md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def short(message: str) -> str:
    text = re.sub(r"^(AssertionError|Failed):\s*", "", message.strip().splitlines()[0]
                  if message.strip() else "")
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def render(claims: Mapping[str, Any], reports: list[Mapping[str, Any]],
           names: list[str]) -> str:
    columns, cells = judge(claims, reports)
    runs = "; ".join(f"`{n}` (started {d.get('started', '?')}, seed {d.get('seed', '?')})"
                     for n, d in zip(names, reports, strict=True))
    out = [
        "<!-- generated by scripts/rfc_claims.py from fixtures/rfc-claims.toml and the stored "
        "reports; edits here are overwritten -->",
        "",
        "# The RFCs' measurements, reproduced",
        "",
        "Each measured claim the three RFCs (`shared/rfcs/`) make about Mooncake 0.3.13, the "
        "suite test that reproduces it, and what that test saw per release and deployment "
        "profile ([deployment-profiles.md](deployment-profiles.md)). *reproduces*: the test "
        "FAILed as the claim says; *does not reproduce*: it passed; *fails otherwise*: it "
        "FAILed for another reason (e.g. an interface the build lacks); *n/a*: the build lacks "
        "a means the test needs; *not run*: no stored report ran it in that column.",
        "",
        f"Reports: {runs}. Regenerate with `python scripts/rfc_claims.py`; the mapping is "
        "`fixtures/rfc-claims.toml`.",
        "",
        "| claim | RFC | on 0.3.13 | " + " | ".join(c.heading for c in columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for claim in claims["claim"]:
        row = cells[claim["id"]]
        out.append(f"| {claim['id']} | {claim['rfc'].split('-')[0]} | "
                   f"{md(agreement(claim, columns, row))} | "
                   + " | ".join(row[c.label][0] for c in columns) + " |")
    out += ["", "## The claims and what the tests saw", ""]
    for claim in claims["claim"]:
        row = cells[claim["id"]]
        out += [f"### {claim['id']}", "", f"{md(claim['claim'])} ({claim['rfc']})", ""]
        if claim["tests"]:
            where = f" (version-skew pair `{claim['pair']}`)" if claim.get("pair") else ""
            out += ["Tests" + where + ": " + ", ".join(f"`{t}`" for t in claim["tests"]), ""]
            if claim.get("seen"):
                # an HTML code element, escaped: Python-Markdown's HTML pass reads "<![" inside a
                # code span as a marked section and the strict build stops
                out += [f"Reproduced when the failure message matches "
                        f"<code>{html.escape(claim['seen'])}</code>.", ""]
        if claim.get("note"):
            out += [f"Note: {md(claim['note'])}.", ""]
        if not claim["tests"]:
            continue
        for column in columns:
            verdict, message = row[column.label]
            if column.release.startswith(FOCUS) and verdict != NOT_RUN:
                said = f": {md(short(message))}" if message else ""
                out.append(f"- {column.release} with {md(flags_of(claim, column))}: "
                           f"{verdict}{said}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def build_page(claims_path: Path = CLAIMS) -> str:
    claims = load_claims(claims_path)
    names = list(claims["reports"])
    reports = [json.loads((ROOT / n).read_text()) for n in names]
    return render(claims, reports, names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/rfc-claims.md differs from what the reports give")
    args = parser.parse_args(argv)
    page = build_page()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/rfc_claims.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
