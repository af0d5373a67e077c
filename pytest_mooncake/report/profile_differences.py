"""Where one build's verdict on a requirement depends on how it was deployed: one line per
requirement whose verdicts differ between the profiles of one build in a report's columns
("MP-6 on mooncake-non-cuda==0.3.13.post1: pass with ha-oplog (--enable_oplog=true); FAIL with
defaults (no --enable_oplog): 0 of 30 objects after failover ..."), computed from the columns'
results and ``deployment`` records alone, so the terminal, the JSON report and the judging
page say the same."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

MESSAGE_LIMIT = 220
PREFIX = re.compile(r"^(AssertionError|Failed|AssertionError:\s*assert)\s*:?\s*")


def build_and_profile(label: str, column: Mapping[str, Any]) -> tuple[str, str | None]:
    """The build a column judges and its profile name (None: no deployment recorded, e.g. the
    reference engine)."""
    deployment = column.get("deployment") or {}
    profile = (deployment.get("profile") or {}).get("name")
    return deployment.get("build") or label, profile


def phrase(deployment: Mapping[str, Any] | None) -> str:
    """A profile as one phrase: ``ha-oplog (--enable_oplog=true)``."""
    profile = (deployment or {}).get("profile") or {}
    name = profile.get("name", "?")
    line = profile.get("in_one_line") or ""
    if not line or line.startswith(name):
        return line or name
    return f"{name} ({line})"


def deployment_line(deployment: Mapping[str, Any] | None) -> str:
    """What the terminal header says of a column's deployment ("" for none recorded)."""
    if not deployment:
        return ""
    masters = deployment.get("masters") or {}
    flags = masters.get("flags")
    shown = " ".join(flags) if isinstance(flags, list) else str(flags or "")
    return f"{phrase(deployment)}; masters: {shown}" if shown else phrase(deployment)


def first_message(entry: Mapping[str, Any]) -> str:
    """The first failure message of a requirement's tests, one line, shortened."""
    for test in entry.get("tests", []):
        message = test.get("message")
        if message and test.get("outcome") in ("failed", "error"):
            text = PREFIX.sub("", message.strip().splitlines()[0]).strip()
            return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."
    return ""


def differing_verdicts(columns: Mapping[str, Mapping[str, Any]]) -> Iterator[
        tuple[str, str, list[tuple[str, Mapping[str, Any]]]]]:
    """``(build, requirement, [(label, entry), ...])`` for each requirement whose verdicts
    differ between the profiles of one build, in column order: what every rendering of the
    differences (this module's lines, the README's short ones) is made from."""
    builds: dict[str, list[str]] = {}
    for label, column in columns.items():
        build, profile = build_and_profile(label, column)
        if profile is not None:
            builds.setdefault(build, []).append(label)
    for build, labels in builds.items():
        if len(labels) < 2:
            continue
        reqs: list[str] = []
        for label in labels:
            reqs += [r for r in columns[label].get("requirements", {}) if r not in reqs]
        for req in reqs:
            judged = [(label, columns[label]["requirements"][req]) for label in labels
                      if req in columns[label].get("requirements", {})]
            if len({entry["verdict"] for _, entry in judged}) >= 2:
                yield build, req, judged


def profile_differences(columns: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per (build, requirement) whose verdicts differ between the build's profiles,
    in column order."""
    lines = []
    for build, req, judged in differing_verdicts(columns):
        parts = []
        for label, entry in judged:
            part = f"{entry['verdict']} with {phrase(columns[label].get('deployment'))}"
            message = first_message(entry) if entry["verdict"] != "pass" else ""
            parts.append(f"{part}: {message}" if message else part)
        lines.append(f"{req} on {build}: " + "; ".join(parts))
    return lines
