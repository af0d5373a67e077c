"""The conformance matrix as JSON (``--mc-report``): the shape the README documents and
``scripts/judge_mooncake.py`` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_mooncake.report.conformance_matrix import ConformanceMatrix, pair_label


def column_document(matrix: ConformanceMatrix, column: str) -> dict[str, Any]:
    """``{REQ: {"verdict": ..., "tests": [...]}}`` of one column (or pair cell)."""
    out = {}
    for req in matrix.requirement_ids():
        verdict = matrix.verdict(req, column)
        if verdict is None:
            continue
        tests = []
        for t in sorted(matrix.tests(req, column), key=lambda t: t.nodeid):
            entry: dict[str, Any] = {"nodeid": t.nodeid, "outcome": t.outcome}
            if t.reason:
                entry["reason"] = t.reason
            if t.not_applicable is not None and t.not_applicable.capability:
                entry["capability"] = t.not_applicable.capability
            if t.message:
                entry["message"] = t.message
            tests.append(entry)
        out[req] = {"verdict": verdict, "tests": tests}
    return out


def _with_pairs(matrix: ConformanceMatrix, column: str) -> dict[str, Any]:
    out: dict[str, Any] = {"requirements": column_document(matrix, column)}
    if matrix.pairs.get(column):
        out["pairs"] = {p: {"requirements": column_document(matrix, pair_label(column, p))}
                        for p in sorted(matrix.pairs[column])}
    return out


def to_json(matrix: ConformanceMatrix, seed: int,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report: one column as the documented flat form; several also under ``columns``."""
    first = matrix.columns[0] if matrix.columns else ""
    doc: dict[str, Any] = {"target": first, "seed": seed, **_with_pairs(matrix, first)}
    if len(matrix.columns) > 1:
        doc["columns"] = {c: _with_pairs(matrix, c) for c in matrix.columns}
    if extra:
        doc.update(extra)
    return doc


def write_json(matrix: ConformanceMatrix, path: str | Path, seed: int,
               extra: dict[str, Any] | None = None) -> None:
    Path(path).write_text(json.dumps(to_json(matrix, seed, extra), indent=2) + "\n")
