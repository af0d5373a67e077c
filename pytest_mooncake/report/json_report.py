"""The conformance matrix as JSON (``--mc-report``): the shape docs/reference/report-schema.md documents,
``pytest_mooncake/data/report.schema.json`` declares and ``scripts/judge_mooncake.py`` reads.

One target: the flat form (``target``, ``target_version``, ``requirements``). A matrix
(``--mc-matrix``): ``matrix`` and ``columns``, one entry per target with its version; no flat
form, so no reader takes the first column for the run. Both carry ``schema_version``, the start
time, the duration, the seed, summary counts and each test's duration; a real build's column
also its ``deployment`` (``targets/mooncake/judged_configuration``), and a matrix the
``profile_differences`` lines where one build's profiles disagree.

Schema version 2 added the verdict ``intermittent`` (in ``verdict`` and the summary's counts),
each re-run test's ``runs`` (seed, outcome and replay command of every run of it), each re-run
requirement's ``confirmation`` (k/N, the verdict per run) and the run's ``reruns`` (the bound
``--mc-confirm`` and each re-run's seed, exit status and log). Readers of version 1 reports
find none of these and no ``intermittent``. A test (and a run of one) that failed on a
counterexample carries its replay token as ``counterexample`` (an added key: version 2 still).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_mooncake.report.conformance_matrix import (
    ConformanceMatrix,
    RunTally,
    TestOutcome,
    pair_label,
)
from pytest_mooncake.report.profile_differences import profile_differences
from pytest_mooncake.report.verdict_rule import VERDICTS

if TYPE_CHECKING:
    from pytest_mooncake.report.confirmation_runs import RerunRecord

SCHEMA_VERSION = 2
"""Bumped when a key is removed or changes meaning, or a value a reader switches on (a verdict)
is added; adding a key keeps the version."""


@dataclass
class RunFacts:
    """What the report records besides the matrix."""

    seed: int
    started: float = 0.0
    """Epoch seconds of the session start."""
    duration: float = 0.0
    matrix: str | None = None
    """The ``--mc-matrix`` spec, when the run had several columns."""
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per column label: ``version``, ``notes`` (libraries supplied here, e.g. stand-ins) and
    ``deployment`` (what a real build's column deployed: ``judged_configuration``)."""
    fail_on: str = "never"
    fail_on_problems: list[str] = field(default_factory=list)
    confirm: int = 0
    """The re-run bound (``--mc-confirm``)."""
    not_rerun: dict[str, str] = field(default_factory=dict)
    """Failed tests left at one run, with why (``--mc-confirm-only=deviations``)."""
    reruns: list[RerunRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def column_document(matrix: ConformanceMatrix, column: str) -> dict[str, Any]:
    """``{REQ: {"verdict": ..., "tests": [...]}}`` of one column (or pair cell)."""
    out = {}
    for req in matrix.requirement_ids():
        verdict = matrix.verdict(req, column)
        if verdict is None:
            continue
        tests = []
        for t in sorted(matrix.tests(req, column), key=lambda t: t.nodeid):
            entry: dict[str, Any] = {"nodeid": t.nodeid, "outcome": t.outcome,
                                     "duration_s": round(t.duration, 3)}
            if t.reason:
                entry["reason"] = t.reason
            if t.not_applicable is not None and t.not_applicable.capability:
                entry["capability"] = t.not_applicable.capability
            if t.message:
                entry["message"] = t.message
            if t.counterexample:
                entry["counterexample"] = t.counterexample
            if t.reruns:
                entry["runs"] = _runs(matrix, t)
            if t.artifacts:
                entry["artifacts"] = list(t.artifacts)
            tests.append(entry)
        out[req] = {"verdict": verdict, "tests": tests}
        tally = matrix.tally(req, column)
        if tally is not None:
            out[req]["confirmation"] = _confirmation(tally)
    return out


def _runs(matrix: ConformanceMatrix, test: TestOutcome) -> list[dict[str, Any]]:
    """Every run of a re-run test, the run itself first."""
    out = []
    first = {"seed": matrix.seed, "outcome": test.outcome,
             "duration_s": round(test.duration, 3), "message": test.message,
             "counterexample": test.counterexample}
    for run in [first, *({"seed": r.seed, "outcome": r.outcome, "duration_s": round(r.duration, 3),
                          "message": r.message, "counterexample": r.counterexample}
                         for r in test.reruns)]:
        for key in ("message", "counterexample"):
            if not run[key]:
                del run[key]
        if matrix.replay is not None:
            run["replay"] = matrix.replay(run["seed"], test.nodeid)
        out.append(run)
    return out


def _confirmation(tally: RunTally) -> dict[str, Any]:
    """k/N of a re-run requirement and its verdict in each run."""
    return {"failed": tally.failed, "judged": tally.judged, "ratio": tally.ratio,
            "runs": [{"seed": seed, "verdict": v} for seed, v in tally.runs],
            "summary": tally.describe()}


def summary(requirements: dict[str, Any]) -> dict[str, Any]:
    """Counts of one column's verdicts and of its tests' outcomes."""
    verdicts = Counter(entry["verdict"] for entry in requirements.values())
    tests: dict[str, str] = {}
    for entry in requirements.values():
        for t in entry["tests"]:
            tests[t["nodeid"]] = t["outcome"]
    outcomes = Counter(tests.values())
    return {"requirements": len(requirements),
            "verdicts": {v: verdicts.get(v, 0) for v in VERDICTS},
            "tests": {o: outcomes.get(o, 0) for o in ("passed", "failed", "skipped", "error")}}


def _column(matrix: ConformanceMatrix, column: str) -> dict[str, Any]:
    reqs = column_document(matrix, column)
    out: dict[str, Any] = {"summary": summary(reqs), "requirements": reqs}
    if matrix.pairs.get(column):
        out["pairs"] = {p: {"requirements": column_document(matrix, pair_label(column, p))}
                        for p in sorted(matrix.pairs[column])}
    return out


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def to_json(matrix: ConformanceMatrix, run: RunFacts) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "started": _iso(run.started),
                           "duration_s": round(run.duration, 3), "seed": run.seed}
    if len(matrix.columns) > 1 or run.matrix:
        doc["matrix"] = run.matrix or ""
        doc["columns"] = {c: {"target": c, **_facts(run, c), **_column(matrix, c)}
                          for c in matrix.columns}
        doc["summary"] = summary({f"{c} {r}": e for c, col in doc["columns"].items()
                                  for r, e in col["requirements"].items()})
        differences = profile_differences(doc["columns"])
        if differences:
            doc["profile_differences"] = differences
    else:
        first = matrix.columns[0] if matrix.columns else ""
        facts = _facts(run, first)
        doc.update({"target": first, "target_version": facts["version"]})
        if facts.get("notes"):
            doc["target_notes"] = facts["notes"]
        if facts.get("deployment"):
            doc["deployment"] = facts["deployment"]
        doc.update(_column(matrix, first))
    doc["fail_on"] = {"rule": run.fail_on, "problems": list(run.fail_on_problems)}
    doc["reruns"] = {"bound": run.confirm, "runs": [r.as_json() for r in run.reruns]}
    if run.not_rerun:
        doc["reruns"]["not_rerun"] = dict(run.not_rerun)
    doc.update(run.extra)
    return doc


def _facts(run: RunFacts, column: str) -> dict[str, Any]:
    facts = run.targets.get(column, {})
    out = {"version": facts.get("version", "unknown")}
    if facts.get("notes"):
        out["notes"] = facts["notes"]
    if facts.get("deployment"):
        out["deployment"] = facts["deployment"]
    return out


def write_json(matrix: ConformanceMatrix, path: str | Path, run: RunFacts) -> None:
    Path(path).write_text(json.dumps(to_json(matrix, run), indent=2) + "\n")
