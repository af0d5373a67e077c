"""The terminal summary's word on our own bugs: a line per failed test of this run whose
failure message the harness-symptom vocabulary (failure_vocabulary.py) reads as the harness's,
so a fresh run shows a verdict caused by the harness where it is made, not in a later audit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_mooncake.report.failure_vocabulary import failures

HEADING = ("failure messages that show a harness symptom (a bug of ours, not the build's: "
           "docs/verdict-stability.md):")


def harness_symptom_lines(doc: Mapping[str, Any], width: int = 160) -> list[str]:
    """The heading and one line per (column, failed test) whose first harness-read message
    names the symptom, its message's first line and the fix; nothing when there is none."""
    lines: dict[tuple[str, str], str] = {}
    for failure in failures(doc):
        symptom = failure.symptom
        if symptom is None or (failure.column, failure.nodeid) in lines:
            continue
        said = failure.first_line
        said = said if len(said) <= width else said[:width - 3] + "..."
        lines[(failure.column, failure.nodeid)] = (
            f"  {failure.requirement} {failure.nodeid} [{failure.column}]: {symptom.name}: "
            f"{said} (fix: {symptom.fix})")
    return [HEADING, *lines.values()] if lines else []
