"""Logs of the processes a test used, shown on failure and attached to allure results."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_mooncake.report.allure_glue import allure_if_active, attach_text
from pytest_mooncake.report.log_dedup import dedupe

LOG_SOURCES = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()
TAIL_LINES = 60


def attach_log(node: pytest.Item | pytest.FixtureRequest, title: str,
               source: Path | Callable[[], str]) -> None:
    """Register a log to show (tail) in the report of ``node``'s test if it fails."""
    item = getattr(node, "node", node)
    if not isinstance(item, pytest.Item):
        return
    reader = source if callable(source) else (lambda p=Path(source): _read(p))
    item.stash.setdefault(LOG_SOURCES, []).append((title, reader))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"


def collect_failure_logs(item: pytest.Item) -> list[tuple[str, str]]:
    out = []
    for title, reader in item.stash.get(LOG_SOURCES, []):
        try:
            text = reader()
        except Exception as exc:  # a broken log reader must not hide the test's own failure
            text = f"(could not read log: {exc})"
        out.append((title, text))
    return out


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


FIXTURE_LOGS = pytest.StashKey[dict[str, tuple[str, Callable[[], str]]]]()


def attach_fixture_log(config: pytest.Config, fixturename: str, title: str,
                       source: Path | Callable[[], str]) -> None:
    """A log of a (session-scoped) fixture, shown for every failing test that used it."""
    reader = source if callable(source) else (lambda p=Path(source): _read(p))
    config.stash.setdefault(FIXTURE_LOGS, {})[fixturename] = (title, reader)


def logs_for(item: pytest.Item) -> list[tuple[str, str]]:
    """Every log registered for this test or for a fixture it used."""
    out = collect_failure_logs(item)
    for name, (title, reader) in item.config.stash.get(FIXTURE_LOGS, {}).items():
        if name in getattr(item, "fixturenames", ()):
            try:
                out.append((title, reader()))
            except Exception as exc:
                out.append((title, f"(could not read log: {exc})"))
    return out


def show_failure_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add every log of a failed test to its report (a section each, the tail of it with
    repeated lines folded) and, when allure records, attach each one whole (folded too)."""
    for title, text in logs_for(item):
        folded = dedupe(text)
        report.sections.append((f"Captured {title}", tail(folded)))
        attach_text(item.config, title, folded)


def attach_passing_logs(item: pytest.Item) -> None:
    """When allure records, a passing test's own logs too (folded): what its processes did
    when the requirement held is the baseline a reader compares a failure with. Logs of
    session fixtures (etcd) are left to failing tests: they would repeat in every result."""
    if allure_if_active(item.config) is None:
        return
    for title, text in collect_failure_logs(item):
        attach_text(item.config, title, dedupe(text))
