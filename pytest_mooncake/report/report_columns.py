"""A stored JSON report (``--mc-report``) read back as columns, whatever its form.

The flat form (one target) and the matrix form (``columns``) read alike here: a ``Column`` per
target label with its version, seed, requirements and skew-pair cells. ``report diff``,
``report merge`` and ``report check`` all read reports through this module, so they accept
every schema version in ``READABLE_SCHEMA_VERSIONS`` and treat verdict strings as data (a verdict
added later, such as ``intermittent``, passes through unchanged).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READABLE_SCHEMA_VERSIONS = (1, 2)


class ReportError(ValueError):
    """A report that cannot be read; the message names the file and what was wrong."""


@dataclass(frozen=True)
class Column:
    """One target's results: ``requirements`` as the report writes them (``{REQ: {"verdict",
    "tests"}}``) and ``pairs`` (``{PAIR: {REQ: {...}}}``)."""

    label: str
    version: str
    seed: int | None
    requirements: Mapping[str, Any]
    pairs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    document: Mapping[str, Any] = field(default_factory=dict)
    """The column's own keys as read (target, version, notes, summary, ...)."""

    def verdict(self, req: str) -> str | None:
        entry = self.requirements.get(req)
        return entry.get("verdict") if entry else None

    def test_verdicts(self) -> dict[tuple[str, str], str]:
        """``(REQ, test id) -> verdict`` of each test on its own (the verdict rule applied to
        its single outcome), the test id without the column (``column_free_id``)."""
        return {(req, column_free_id(t["nodeid"], self.label)): TEST_VERDICT.get(t["outcome"],
                                                                         t["outcome"])
                for req, entry in self.requirements.items() for t in entry.get("tests", [])}

    def pair_verdicts(self) -> dict[tuple[str, str], str]:
        """``(REQ, pair) -> verdict`` of each skew-pair cell."""
        return {(req, pair): entry["verdict"] for pair, reqs in self.pairs.items()
                for req, entry in reqs.items()}


TEST_VERDICT = {"passed": "pass", "failed": "FAIL", "skipped": "n/a", "error": "error"}
"""A test's outcome as a verdict: what the verdict rule makes of one test alone."""


def column_free_id(nodeid: str, column: str) -> str:
    """A test's node id without its matrix column: a matrix run parametrizes every test by the
    column label (``test_x[mooncake-cuda13==0.3.14-etcd]``), a one-target run does not
    (``test_x[etcd]``); expectations and diffs name tests the second way, so one id means the
    same test in every column and run."""
    head, bracket, params = nodeid.partition("[")
    if not bracket:
        return nodeid
    params = params.removesuffix("]")
    if params == column:
        return head
    if params.endswith(f"-{column}"):
        params = params[: -len(column) - 1]
    elif params.startswith(f"{column}-"):
        params = params[len(column) + 1:]
    else:
        params = params.replace(f"-{column}-", "-", 1)
    return f"{head}[{params}]"


def read_report(path: str | Path) -> dict[str, Any]:
    """The report at ``path`` as a dict; ``ReportError`` naming the file otherwise."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    check_readable(doc, str(path))
    return doc


def check_readable(doc: Any, where: str) -> None:
    if not isinstance(doc, dict):
        raise ReportError(f"{where}: not a pytest-mooncake report (a JSON object)")
    version = doc.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ReportError(f"{where}: schema_version {version!r} is not one this reader knows "
                          f"({', '.join(map(str, READABLE_SCHEMA_VERSIONS))})")
    if not isinstance(doc.get("columns"), dict) and "requirements" not in doc:
        raise ReportError(f"{where}: neither a matrix (columns) nor a one-target report "
                          f"(target, requirements)")


def columns(doc: Mapping[str, Any]) -> dict[str, Column]:
    """Every column of a report, by label, in the report's order."""
    if isinstance(doc.get("columns"), dict):
        return {label: _column(label, col, col.get("seed", doc.get("seed")))
                for label, col in doc["columns"].items()}
    label = doc.get("target", "")
    flat = {"target": label, "version": doc.get("target_version", "unknown"),
            **({"notes": doc["target_notes"]} if doc.get("target_notes") else {}),
            **{k: doc[k] for k in ("deployment", "summary", "requirements", "pairs") if k in doc}}
    return {label: _column(label, flat, doc.get("seed"))}


def _column(label: str, col: Mapping[str, Any], seed: Any) -> Column:
    pairs = {p: cell.get("requirements", {}) for p, cell in (col.get("pairs") or {}).items()}
    return Column(label, col.get("version", "unknown"), seed if isinstance(seed, int) else None,
                  col.get("requirements", {}), pairs, col)


def pick(found: Mapping[str, Column], wanted: str, where: str) -> Column:
    """The column ``wanted`` (a label, or a unique substring of one, e.g. ``0.3.14``)."""
    if wanted in found:
        return found[wanted]
    matches = [label for label in found if wanted in label]
    if len(matches) == 1:
        return found[matches[0]]
    raise ReportError(f"{where}: {'no' if not matches else 'more than one'} column matches "
                      f"{wanted!r} (columns: {', '.join(found) or 'none'})")
