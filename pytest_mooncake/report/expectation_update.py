"""``--mc-expect-update`` (and ``report expect``): an expectations file written from a run.

Each requirement, listed test and skew pair the run judged takes the run's verdict; what the
file said stays where the run agrees with it (a set that holds the verdict is kept whole) and
its reasons and issue links are kept; requirements the run did not judge keep their entry; the
file's leading comment block is kept. The result loads back to expectations that the same run
matches entirely (the round trip ``tests/report/test_expectations_plugin.py`` checks).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from pytest_mooncake.report.expectations import Expectation, TargetExpectations
from pytest_mooncake.report.report_columns import Column
from pytest_mooncake.schemas.expectation_file import DEFAULT_EXPECTED


def _entry(old: Expectation | None, got: str) -> Expectation:
    if old is None:
        return Expectation((got,))
    if got in old.verdicts:
        return old
    return Expectation((got,), old.reason, old.issue)


def _value(exp: Expectation) -> Any:
    if not (exp.reason or exp.issue):
        return exp.verdicts[0] if len(exp.verdicts) == 1 else list(exp.verdicts)
    out: dict[str, Any] = {"verdict": exp.verdicts[0] if len(exp.verdicts) == 1
                           else list(exp.verdicts)}
    if exp.reason:
        out["reason"] = exp.reason
    if exp.issue:
        out["issue"] = exp.issue
    return out


def updated_document(column: Column, old: TargetExpectations | None, profile: str = "",
                     order: Callable[[str], Any] = str) -> dict[str, Any]:
    """The TOML document of ``old`` brought up to ``column``'s results."""
    reqs = dict(old.requirements) if old else {}
    tests = dict(old.tests) if old else {}
    pairs = dict(old.pairs) if old else {}
    default = old.default if old else Expectation(DEFAULT_EXPECTED)
    for req, entry in column.requirements.items():
        reqs[req] = _entry(reqs.get(req), entry["verdict"])
    for key, got in column.test_verdicts().items():
        if key in tests:  # a test is listed only where someone listed it; never added
            tests[key] = _entry(tests[key], got)
    for key, got in column.pair_verdicts().items():
        pairs[key] = _entry(pairs.get(key), got)
    body: dict[str, Any] = {}
    for req in sorted(reqs, key=order):
        value = _value(reqs[req])
        own_tests = {t: _value(e) for (r, t), e in sorted(tests.items()) if r == req}
        own_pairs = {p: _value(e) for (r, p), e in sorted(pairs.items()) if r == req}
        if own_tests or own_pairs:
            value = value if isinstance(value, dict) else {"verdict": value}
            value.update({"tests": own_tests} if own_tests else {})
            value.update({"pairs": own_pairs} if own_pairs else {})
        body[req] = value
    doc: dict[str, Any] = {"target": column.version,
                           "profile": profile or (old.profile if old else "")}
    doc["default"] = list(default.verdicts) if len(default.verdicts) > 1 else default.verdicts[0]
    doc["requirements"] = body
    return doc


def leading_comments(path: Path) -> str:
    """The comment block at the top of an existing file (kept on update)."""
    if not path.is_file():
        return ""
    lines = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            break
        if line.strip() or lines:
            lines.append(line)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n\n" if lines else ""


def write_expectations(path: Path, doc: dict[str, Any], header: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + tomli_w.dumps(doc))
