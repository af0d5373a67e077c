"""What the dashboard shows of one ``--mc-report`` file, or of two side by side.

A report (flat or matrix, ``data/report.schema.json``) becomes a ``Grid``: columns (targets),
requirement rows grouped by RFC family in catalogue order, version-skew pair rows below, and per
cell the tests behind its verdict with what a person needs to act on them (message, n/a reason,
duration, the command that runs the test again). ``diff`` pairs two grids cell by cell. Nothing
here renders HTML: ``dashboard.py`` does, from these values.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_mooncake.report.catalogue import Catalogue, load_catalogue

KNOWN_VERDICTS = {"pass": "pass", "FAIL": "fail", "n/a": "na", "error": "error",
                  "intermittent": "intermittent"}
"""Verdict -> CSS class. A verdict not listed (a later version's) is shown as ``unknown``."""
REPLAY_TOKEN = re.compile(r"--mc-replay=(\S+)")
ARTIFACT_PATH = re.compile(r"(\S+\.(?:timeline\.html|plot\.png))\b")
"""A chaos run's timeline and plot, where a message names them (``chaos/run_report.py``)."""
OTHER_FAMILY = ("", "other requirements")
OUTCOME_ORDER = {"failed": 0, "error": 1, "passed": 2, "skipped": 3}
"""A cell lists what went wrong first."""


def verdict_class(verdict: str | None) -> str:
    if verdict is None:
        return "none"
    return KNOWN_VERDICTS.get(verdict, "unknown")


@dataclass(frozen=True)
class TestResult:
    """One test behind a cell."""

    nodeid: str
    outcome: str
    duration_s: float | None
    message: str = ""
    reason: str = ""
    capability: str = ""
    replay: str = ""
    artifacts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.nodeid.rpartition("::")[2]

    @property
    def file(self) -> str:
        return self.nodeid.partition("::")[0]


@dataclass(frozen=True)
class Cell:
    """One requirement (or skew pair and requirement) in one column."""

    anchor: str
    verdict: str
    tests: tuple[TestResult, ...]

    @property
    def css(self) -> str:
        return verdict_class(self.verdict)

    @property
    def label(self) -> str:
        """``pass 8``, ``FAIL 5/8``, ``pass 1 +2 n/a``, ``n/a``: the verdict and its counts."""
        count = {o: sum(t.outcome == o for t in self.tests) for o in
                 ("passed", "failed", "error", "skipped")}
        if self.verdict == "pass":
            return f"pass {count['passed']}" + (f" +{count['skipped']} n/a" if count["skipped"] else "")
        if self.verdict in ("FAIL", "intermittent"):
            return f"{self.verdict} {count['failed']}/{len(self.tests)}"
        if self.verdict == "error":
            return f"error {count['error']}/{len(self.tests)}"
        return self.verdict


@dataclass(frozen=True)
class Column:
    key: str
    """The report's column name (a target label)."""
    title: str
    """How the grid heads it: a release by its version, anything else as it is."""
    version: str
    notes: str
    tally: dict[str, int]
    """Verdict -> number of requirements with it in this column."""


@dataclass(frozen=True)
class Row:
    req: str
    title: str
    cells: tuple[Cell | None, ...]
    pair: str = ""


@dataclass(frozen=True)
class FamilyRows:
    family: str
    name: str
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Grid:
    """A report as the dashboard shows it."""

    source: str
    columns: tuple[Column, ...]
    families: tuple[FamilyRows, ...]
    pairs: tuple[Row, ...]
    facts: dict[str, str] = field(default_factory=dict)
    """Run facts for the header: started, duration, seed, matrix or target, judged."""
    problems: tuple[str, ...] = ()
    """``--mc-fail-on`` breaches the report lists."""

    def cells(self) -> list[tuple[Row, Column, Cell]]:
        rows = [r for f in self.families for r in f.rows] + list(self.pairs)
        return [(r, c, cell) for r in rows for c, cell in zip(self.columns, r.cells, strict=True)
                if cell is not None]


# ------------------------------------------------------------------------------------- one report


def short_title(column: str) -> str:
    """``mooncake-cuda13==0.3.14`` -> ``0.3.14``; other labels as they are."""
    return column.rpartition("==")[2] if "==" in column else column


def report_columns(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Column name -> column document, for matrix and flat reports alike."""
    if doc.get("columns"):
        return dict(doc["columns"])
    if doc.get("target"):
        return {doc["target"]: {"version": doc.get("target_version", ""),
                                "notes": doc.get("target_notes", ""),
                                "requirements": doc.get("requirements", {}),
                                "pairs": doc.get("pairs", {})}}
    raise ValueError("not a pytest-mooncake report: it has neither 'columns' nor 'target'")


def replay_command(doc: Mapping[str, Any], column: str, test: Mapping[str, Any]) -> str:
    """The command that runs this test again with the run's seed (and its schedule, where an
    exploration printed a replay token)."""
    argv = ["python", "-m", "pytest", "-p", "pytest_mooncake", test["nodeid"]]
    argv.append(f"--mc-matrix={doc['matrix']}" if doc.get("matrix") else f"--mc-target={column}")
    if doc.get("seed") is not None:
        argv.append(f"--mc-seed={doc['seed']}")
    token = REPLAY_TOKEN.search(test.get("message") or "")
    if token:
        argv.append(f"--mc-replay={token.group(1)}")
    return shlex.join(argv)


def test_result(doc: Mapping[str, Any], column: str, test: Mapping[str, Any]) -> TestResult:
    message = test.get("message") or ""
    artifacts = tuple(dict.fromkeys([*test.get("artifacts", ()), *ARTIFACT_PATH.findall(message)]))
    return TestResult(nodeid=test["nodeid"], outcome=test.get("outcome", "?"),
                      duration_s=test.get("duration_s"), message=message,
                      reason=test.get("reason") or "", capability=test.get("capability") or "",
                      replay=replay_command(doc, column, test), artifacts=artifacts)


def make_cell(doc: Mapping[str, Any], column: str, entry: Mapping[str, Any] | None,
              anchor: str) -> Cell | None:
    if not entry:
        return None
    tests = sorted((test_result(doc, column, t) for t in entry.get("tests", [])),
                   key=lambda t: OUTCOME_ORDER.get(t.outcome, len(OUTCOME_ORDER)))
    return Cell(anchor, str(entry.get("verdict", "?")), tuple(tests))


def requirement_order(ids: set[str], catalogue: Catalogue) -> list[str]:
    return sorted(ids, key=catalogue.order)


def run_facts(doc: Mapping[str, Any]) -> dict[str, str]:
    facts = {"started": str(doc.get("started", "")), "seed": str(doc.get("seed", ""))}
    if doc.get("duration_s") is not None:
        facts["duration"] = f"{float(doc['duration_s']) / 60:.1f} min"
    facts["matrix" if doc.get("matrix") else "target"] = str(doc.get("matrix") or doc.get("target"))
    judged = doc.get("judged") or {}
    if judged.get("date"):
        facts["judged"] = str(judged["date"])
    return facts


def grid(doc: Mapping[str, Any], source: str, prefix: str = "c",
         catalogue: Catalogue | None = None) -> Grid:
    """The grid of one report. ``prefix`` keeps cell anchors apart when pages show several."""
    catalogue = catalogue or load_catalogue()
    columns_doc = report_columns(doc)
    keys = list(columns_doc)
    columns = tuple(Column(
        key=k, title=short_title(k), version=str(c.get("version", "")), notes=str(c.get("notes", "")),
        tally={v: n for v, n in _tally(c.get("requirements", {})).items() if n})
        for k, c in columns_doc.items())
    ids = requirement_order({r for c in columns_doc.values() for r in c.get("requirements", {})},
                            catalogue)
    by_family: dict[str, list[Row]] = {}
    for req in ids:
        cells = tuple(make_cell(doc, k, columns_doc[k].get("requirements", {}).get(req),
                                f"{prefix}-{i}-{req}") for i, k in enumerate(keys))
        title = catalogue[req].title if req in catalogue else ""
        by_family.setdefault(req.partition("-")[0], []).append(Row(req, title, cells))
    families = tuple(FamilyRows(fam, catalogue.families[fam].name if fam in catalogue.families
                                else OTHER_FAMILY[1], tuple(rows))
                     for fam, rows in by_family.items())
    pair_keys = sorted({(pair, req) for c in columns_doc.values()
                        for pair, p in (c.get("pairs") or {}).items() for req in p.get("requirements", {})},
                       key=lambda pr: (catalogue.order(pr[1]), pr[0]))
    pairs = tuple(Row(req, catalogue[req].title if req in catalogue else "", tuple(
        make_cell(doc, k, ((columns_doc[k].get("pairs") or {}).get(pair) or {})
                  .get("requirements", {}).get(req), f"{prefix}-{i}-{req}-{_slug(pair)}")
        for i, k in enumerate(keys)), pair=pair) for pair, req in pair_keys)
    problems = tuple((doc.get("fail_on") or {}).get("problems", []))
    return Grid(source, columns, families, pairs, run_facts(doc), problems)


def _tally(requirements: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in requirements.values():
        out[entry.get("verdict", "?")] = out.get(entry.get("verdict", "?"), 0) + 1
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


# ------------------------------------------------------------------------------------- two reports


@dataclass(frozen=True)
class Change:
    """One cell of the diff: the verdict before (first report) and after (second)."""

    anchor: str
    before: Cell | None
    after: Cell | None
    req: str = ""
    column: str = ""
    pair: str = ""

    @property
    def state(self) -> str:
        """``same``, ``changed`` (judged in both, verdicts differ), ``added`` (only the second
        report judged it), ``removed`` (only the first) or ``none`` (neither)."""
        if self.before is None and self.after is None:
            return "none"
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "same" if self.before.verdict == self.after.verdict else "changed"

    @property
    def changed(self) -> bool:
        return self.state == "changed"

    @property
    def css(self) -> str:
        return verdict_class(self.after.verdict if self.after else None)

    @property
    def label(self) -> str:
        if self.after is None:
            return f"({self.before.verdict})" if self.before else "–"
        if self.before is None:
            return self.after.verdict
        if self.state == "same":
            return self.after.verdict
        return f"{self.before.verdict} → {self.after.verdict}"

    def test_changes(self) -> list[tuple[TestResult | None, TestResult | None]]:
        """(result before, result after) of every test by node id (None where a report has
        no such test), changed outcomes first."""
        before = {t.nodeid: t for t in (self.before.tests if self.before else ())}
        after = {t.nodeid: t for t in (self.after.tests if self.after else ())}
        rows = [(before.get(n), after.get(n)) for n in dict.fromkeys([*after, *before])]
        return sorted(rows, key=lambda r: (r[0] and r[0].outcome) == (r[1] and r[1].outcome))


@dataclass(frozen=True)
class DiffRow:
    req: str
    title: str
    changes: tuple[Change, ...]
    pair: str = ""


@dataclass(frozen=True)
class Diff:
    before: Grid
    after: Grid
    columns: tuple[str, ...]
    """Column keys: the second report's order, then columns only the first has."""
    renamed: dict[str, str]
    """Second report's column -> the first report's column of the same build under another
    name (matched by version, e.g. ``mooncake`` and ``mooncake-non-cuda==0.3.13.post1``)."""
    families: tuple[tuple[str, str, tuple[DiffRow, ...]], ...]
    pairs: tuple[DiffRow, ...]

    def changes(self, state: str = "changed") -> list[Change]:
        rows = [r for _, _, rows in self.families for r in rows] + list(self.pairs)
        return [c for r in rows for c in r.changes if c.state == state]

    def heading(self, key: str) -> str:
        old = self.renamed.get(key)
        return f"{short_title(old)} → {short_title(key)}" if old else short_title(key)


def matched_columns(before: Grid, after: Grid) -> dict[str, str]:
    """Second report's column -> first report's column of the same name, or else of the same
    version where exactly one column of each report has it."""
    names = {c.key for c in before.columns}
    out = {c.key: c.key for c in after.columns if c.key in names}

    def unique_versions(g: Grid) -> dict[str, str]:
        seen: dict[str, list[str]] = {}
        for c in g.columns:
            if c.version:
                seen.setdefault(c.version, []).append(c.key)
        return {v: ks[0] for v, ks in seen.items() if len(ks) == 1}

    old_by_version = unique_versions(before)
    taken = set(out.values())
    for version, key in unique_versions(after).items():
        old = old_by_version.get(version)
        if key not in out and old and old not in taken:
            out[key] = old
            taken.add(old)
    return out


def diff(before: Grid, after: Grid, catalogue: Catalogue | None = None) -> Diff:
    """Cell by cell, matched by column name and requirement (and skew pair)."""
    catalogue = catalogue or load_catalogue()
    matched = matched_columns(before, after)
    as_after = {old: new for new, old in matched.items()}
    keys = [c.key for c in after.columns] + [c.key for c in before.columns if c.key not in as_after]

    def index(g: Grid, rename: Mapping[str, str]) -> dict[tuple[str, str, str], Cell]:
        rows = [r for f in g.families for r in f.rows] + list(g.pairs)
        return {(r.pair, r.req, rename.get(c.key, c.key)): cell for r in rows
                for c, cell in zip(g.columns, r.cells, strict=True) if cell is not None}

    old, new = index(before, as_after), index(after, {})
    rows_of = sorted({(pair, req) for pair, req, _ in [*old, *new]},
                     key=lambda pr: (catalogue.order(pr[1]), pr[0]))

    def row(pair: str, req: str) -> DiffRow:
        changes = tuple(Change(f"d-{i}-{req}" + (f"-{_slug(pair)}" if pair else ""),
                               old.get((pair, req, k)), new.get((pair, req, k)), req, k, pair)
                        for i, k in enumerate(keys))
        return DiffRow(req, catalogue[req].title if req in catalogue else "", changes, pair)

    families: dict[str, list[DiffRow]] = {}
    for pair, req in rows_of:
        if not pair:
            families.setdefault(req.partition("-")[0], []).append(row(pair, req))
    renamed = {new: old for new, old in matched.items() if new != old}
    return Diff(before, after, tuple(keys), renamed, tuple(
        (fam, catalogue.families[fam].name if fam in catalogue.families else OTHER_FAMILY[1],
         tuple(rows)) for fam, rows in families.items()),
        tuple(row(pair, req) for pair, req in rows_of if pair))
