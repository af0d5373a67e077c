"""Proof of detection: the conformance suites pass on the reference engine's ``rfc`` profile and
FAIL, requirement by requirement, on its ``legacy`` profile wherever the RFCs say Mooncake 0.3.13
lacks the property. The expected verdicts are data: pytest_mooncake/data/verdicts/reference.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.report.catalogue import load_catalogue, tomllib

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("test_detection_proof")

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = tomllib.loads((ROOT / "pytest_mooncake" / "data" / "verdicts" / "reference.toml").read_text())
FAMILIES = ("MR", "CO", "MP")
RUN_DEADLINE = 1200


def expected_verdict(profile: str, req: str) -> str:
    table = EXPECTED[profile]
    return table.get(req, table["default"])


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def run_suites(args: Sequence[str], report: Path, deadline: float) -> dict[str, Any]:
    """Run conformance suites in a child pytest from the repository root (real processes, the
    installed plugin) with ``--mc-report=report`` and return that report, with the run's output
    under ``_output`` and its exit status under ``_exit``. Fails the calling test when the run
    outlives ``deadline`` seconds (it is killed; its children die with it) or writes no report.
    Also used by tests/targets/test_mooncake_suites.py."""
    # One run decides (--mc-confirm=0): these runs prove what the suites detect, within their
    # deadlines; re-runs of failed tests are proved in tests/plugin/test_intermittent_verdicts.py.
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "-p", "no:cacheprovider",
           "-q", "--mc-confirm=0", *args, f"--mc-report={report}"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=deadline)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the suite run did not end within {deadline:.0f}s (a hang): {' '.join(cmd)}\n"
                    f"{_text(exc.stdout)[-4000:]}\n{_text(exc.stderr)[-2000:]}", pytrace=False)
    if not report.exists():
        pytest.fail(f"the suite run wrote no report (exit {proc.returncode}): {' '.join(cmd)}\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}", pytrace=False)
    doc = json.loads(report.read_text())
    doc["_output"] = proc.stdout[-6000:]
    doc["_exit"] = proc.returncode
    return doc


def verdict_mismatches(observed: Mapping[str, Any], expected: Callable[[str], str],
                       requirements: Iterable[str]) -> list[str]:
    """One line per requirement whose verdict in ``observed`` (a report's ``requirements``)
    is not ``expected(req)``; a requirement absent from the report counts as "untested"."""
    wrong = []
    for req in requirements:
        want = expected(req)
        got = observed.get(req, {}).get("verdict", "untested")
        if got != want:
            tests = ", ".join(f"{t['nodeid']} {t['outcome']}" for t in observed.get(req, {}).get("tests", []))
            wrong.append(f"{req}: expected {want}, observed {got} [{tests}]")
    return wrong


@pytest.fixture(scope="module")
def matrix_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("detection") / "matrix.json"
    return run_suites(["suites/", "-n", "2", "--mc-matrix=reference-profiles"], out, RUN_DEADLINE)


@pytest.mark.parametrize(("profile", "column"), [("rfc", "reference"), ("legacy", "reference:legacy")])
def test_verdicts_match_the_expected_ones(matrix_report: dict, profile: str, column: str) -> None:
    catalogue = load_catalogue()
    observed = matrix_report["columns"][column]["requirements"]
    wrong = verdict_mismatches(observed, lambda req: expected_verdict(profile, req),
                               [r for r in catalogue.requirements if r.split("-")[0] in FAMILIES])
    assert not wrong, (f"{column}: {len(wrong)} requirement verdict(s) differ from "
                       f"pytest_mooncake/data/verdicts/reference.toml:\n  " + "\n  ".join(wrong)
                       + "\n\nrun output:\n" + matrix_report["_output"])


def test_nothing_is_skipped_on_the_reference_target(matrix_report: dict) -> None:
    skipped = [t["nodeid"] + ": " + t.get("reason", "")
               for req in matrix_report["columns"]["reference"]["requirements"].values()
               for t in req["tests"] if t["outcome"] != "passed"]
    assert not skipped, "tests not passing on the rfc reference target:\n  " + "\n  ".join(skipped)


def test_the_nemesis_run_catches_legacy(matrix_report: dict) -> None:
    """Every fixture together (engines, metadata proxy, nemesis, history, checkers): the chaos
    test of MR-16 passes on rfc and its checker reports a violation on legacy."""
    def outcome(column: str) -> str:
        tests = matrix_report["columns"][column]["requirements"]["MR-16"]["tests"]
        return next(t["outcome"] for t in tests if "test_chaos.py" in t["nodeid"])

    assert outcome("reference") == "passed"
    assert outcome("reference:legacy") == "failed"
