"""``--mc-durations``: hand the longest tests to xdist first, so two workers stay busy to the end.

Most of a real build's suite time is waiting (lease expiry, failovers, settles), in a few long
tests: run in pytest's order, the last worker still runs a 30 s failover test while the other
has long finished. Ordered longest first, with xdist sending one test at a time
(``--maxschedchunk=1``), load scheduling becomes longest-processing-time-first list scheduling.

Durations come from a report (``--mc-report`` JSON: every test carries ``duration_s``) or from
the table this package ships (``data/durations.json``, made from the stored release reports by
``python -m pytest_mooncake.config.longest_first REPORT.json ... -o FILE``). A test is known
by its node id without its column (as ``report diff`` names tests) and by its target's family
(``reference`` or ``build``), so a table measured on 0.3.13 orders a run of 0.3.14. A test the
table does not know counts as ``UNKNOWN_S``; ties keep pytest's order. Only the order changes:
every test still runs, with the same seed, so the verdicts are the ones of any other order
(what ``report diff`` of runs before and after checks)."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.report.report_columns import column_free_id

SHIPPED = "durations.json"
UNKNOWN_S = 1.0
"""What a test the table does not know is taken to last (most tests of the suites take less)."""


def family(label: str) -> str:
    """Which durations apply to a target: the reference engine's, or a real build's."""
    return "reference" if label.split("@")[0].split(":")[0] == "reference" else "build"


def key(nodeid: str, label: str) -> str:
    """A test's node id without its column (``report_columns.column_free_id``): the same in a
    one-target run, in a matrix and for every build."""
    return column_free_id(nodeid, label) if label else nodeid


def table_from_report(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{family: {key: seconds}}`` of a ``--mc-report`` document (every column and pair; the
    longest where several columns of a family ran a test)."""
    table: dict[str, dict[str, float]] = {}
    for label, column in (doc.get("columns") or {}).items():
        cells = [column.get("requirements") or {}] + [
            pair.get("requirements") or {} for pair in (column.get("pairs") or {}).values()]
        durations = table.setdefault(family(label), {})
        for requirements in cells:
            for entry in requirements.values():
                for test in entry.get("tests", []):
                    k = key(test["nodeid"], label)
                    seconds = float(test.get("duration_s") or 0.0)
                    durations[k] = round(max(durations.get(k, 0.0), seconds), 3)
    return table


def merge(tables: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for table in tables:
        for fam, durations in table.items():
            into = out.setdefault(fam, {})
            for k, s in durations.items():
                into[k] = max(into.get(k, 0.0), s)
    return {fam: dict(sorted(d.items())) for fam, d in sorted(out.items())}


def load_table(spec: str) -> dict[str, dict[str, float]]:
    """The durations ``spec`` names: ``auto`` (the shipped table), a report or a table file.
    A missing or unreadable file is a ``pytest.UsageError`` naming it."""
    if spec == "auto":
        path = Path(str(resources.files("pytest_mooncake").joinpath("data", SHIPPED)))
    else:
        path = Path(spec)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--mc-durations={spec}: cannot read durations from {path} "
                                f"({exc}); give a --mc-report JSON, a durations table, auto "
                                f"or none") from None
    if isinstance(doc, dict) and "columns" in doc:
        return table_from_report(doc)
    if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):
        return doc
    raise pytest.UsageError(f"--mc-durations={spec}: {path} is neither a --mc-report JSON "
                            f"(no 'columns') nor a durations table ({{family: {{test: s}}}})")


def applies(spec: str, workers: int) -> bool:
    """``auto`` orders only runs with xdist workers (a serial run gains nothing from it);
    ``none`` never; a file always."""
    return spec != "none" and (spec != "auto" or workers > 0)


def order(items: list[pytest.Item], table: dict[str, dict[str, float]],
          label_of) -> list[pytest.Item]:
    """``items`` longest first (``label_of(item)``: its target's label); stable for ties."""
    def seconds(item: pytest.Item) -> float:
        label = label_of(item)
        return table.get(family(label), {}).get(key(item.nodeid, label), UNKNOWN_S)

    return sorted(items, key=lambda item: -seconds(item))


def workers(config: pytest.Config) -> int:
    """xdist workers of this run (0: none, or xdist absent); the same on controller and
    workers, which must order the collection identically."""
    n = getattr(config.option, "numprocesses", None)
    if n is None:
        workerinput = getattr(config, "workerinput", None)
        return int(workerinput.get("workercount", 1)) if workerinput else 0
    return int(n or 0)


def one_at_a_time(config: pytest.Config) -> None:
    """With the order in effect, xdist sends one test at a time (unless the command line said
    otherwise): its default first chunks are a quarter of the collection per worker, which
    would give one worker all the longest tests."""
    if hasattr(config.option, "maxschedchunk") and config.option.maxschedchunk is None:
        config.option.maxschedchunk = 1


class LongestFirst:
    """The plugin object ``--mc-durations`` registers: orders the collection (last of the
    ``pytest_collection_modifyitems`` hooks, after selection) on every process."""

    def __init__(self, table: dict[str, dict[str, float]], label_of):
        self.table = table
        self.label_of = label_of

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = order(items, self.table, self.label_of)


def install(config: pytest.Config, spec: str, label_of) -> None:
    """Register the ordering for ``--mc-durations=spec`` where it applies."""
    if not applies(spec, workers(config)):
        return
    config.pluginmanager.register(LongestFirst(load_table(spec), label_of), "mc-longest-first")
    one_at_a_time(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_mooncake.config.longest_first",
        description="Write the durations table --mc-durations reads, from --mc-report JSONs "
                    "(the longest duration of each test over all of them).")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.json")
    args = parser.parse_args(argv)
    tables = []
    for path in args.reports:
        try:
            tables.append(table_from_report(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: not a --mc-report JSON ({exc})", file=sys.stderr)
            return 2
    args.output.write_text(json.dumps(merge(tables), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
