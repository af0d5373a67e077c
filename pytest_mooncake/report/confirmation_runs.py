"""``--mc-confirm=N``: run every failed requirement test again, up to N times, before its
requirement keeps FAIL.

A FAIL must say something about the build, not about one unlucky run. After the session's
tests, the controller runs the tests that failed (call-phase failures: the FAILs) again, each
time in a fresh pytest session with the run's own command line and a session seed of its own:
the run's seed first (the same randomness, a fresh session), then seeds drawn from it, so
the whole run still follows from the one ``--mc-seed``. Each re-run is exactly the replay
command the report prints for that seed, with all failed tests at once (and the run's xdist
workers). Its outcomes come from its JSON report and join each test's runs in the matrix;
``verdict_rule`` turns them into FAIL (failed every time) or intermittent (seen both ways).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mooncake.report.conformance_matrix import ConformanceMatrix, Rerun
from pytest_mooncake.report.replay_commands import PytestCommand
from pytest_mooncake.report.verdict_rule import ERROR, FAILED
from pytest_mooncake.runtime.processes import ProcessStartError, Supervisor

DEFAULT_RERUNS = 2
BASE_DEADLINE = 300.0
"""Seconds a re-run may take beyond ``DEADLINE_FACTOR`` times its tests' time in the run
(session start-up, cluster start-up on a loaded machine)."""
DEADLINE_FACTOR = 4.0
LOG_TAIL = 20


def rerun_seeds(seed: int, count: int) -> list[int]:
    """The session seeds of ``count`` re-runs: the run's own, then seeds drawn from it (each
    different from the ones before, so every new run changes the randomness)."""
    rng = random.Random(f"{seed}/mc-confirm")
    seeds = [seed][:count]
    while len(seeds) < count:
        drawn = rng.getrandbits(32)
        if drawn not in seeds:
            seeds.append(drawn)
    return seeds


@dataclass
class RerunRecord:
    """What one re-run was: its seed, how many tests it ran, how it ended, where its output is."""

    seed: int
    tests: int
    exit_status: int | None
    duration: float
    log: str
    problem: str | None = None
    """Why it judged nothing (it did not finish, or wrote no report), with its output's tail."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": self.seed, "tests": self.tests,
                               "exit_status": self.exit_status,
                               "duration_s": round(self.duration, 3), "log": self.log}
        if self.problem:
            out["problem"] = self.problem
        return out


def reported_outcomes(doc: dict[str, Any]) -> dict[str, Rerun]:
    """Per nodeid, the outcome a ``--mc-report`` document gives it (any column or pair cell;
    a test has one outcome wherever it counts). ``Rerun.seed`` is the report's seed."""
    seed = int(doc.get("seed", 0))
    out: dict[str, Rerun] = {}
    for requirements in _requirement_maps(doc):
        for entry in requirements.values():
            for t in entry.get("tests", []):
                out[t["nodeid"]] = Rerun(seed, t["outcome"], t.get("message"),
                                         float(t.get("duration_s", 0.0)))
    return out


def _requirement_maps(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    holders = list((doc.get("columns") or {}).values()) or [doc]
    for holder in holders:
        yield holder.get("requirements") or {}
        for cell in (holder.get("pairs") or {}).values():
            yield cell.get("requirements") or {}


class ConfirmationRuns:
    """The re-runs of one session (``count`` of them; 0: none)."""

    def __init__(self, command: PytestCommand, count: int, workdir: Callable[[], Path],
                 outputs: Callable[[Path], dict[str, str]] | None = None,
                 leave: Callable[[ConformanceMatrix], dict[str, str]] | None = None):
        self.command = command
        self.count = count
        self.workdir = workdir
        """Where re-runs keep their logs, reports and temporary directories (made on first use)."""
        self.outputs = outputs or (lambda _: {})
        """Extra outputs a re-run must write elsewhere (JUnit XML, Allure), given its directory."""
        self.records: list[RerunRecord] = []
        self.leave = leave
        """Failed tests not to re-run, with why (``expected_failures``: known FAILs)."""
        self.left: dict[str, str] = {}

    def run(self, matrix: ConformanceMatrix, say: Callable[[str], None]) -> list[RerunRecord]:
        """Re-run the matrix's failed tests ``count`` times and fold their outcomes into it."""
        nodeids = matrix.failed_nodeids()
        if not nodeids or self.count <= 0:
            return []
        self.left = self.leave(matrix) if self.leave is not None else {}
        if self.left:
            say(f"not re-run: {len(self.left)} failed test(s) whose FAIL the expectations "
                f"expect (--mc-confirm-only=deviations)")
            nodeids = [n for n in nodeids if n not in self.left]
            if not nodeids:
                return []
        spent = {t.nodeid: t.duration for req, key in matrix.cells()
                 for t in matrix.tests(req, key) if t.outcome == FAILED}
        deadline = BASE_DEADLINE + DEADLINE_FACTOR * sum(spent.values())
        root = self.workdir()
        for i, seed in enumerate(rerun_seeds(matrix.seed, self.count), 1):
            say(f"re-run {i} of {self.count}: {len(nodeids)} failed test(s) with "
                f"--mc-seed={seed} ...")
            record, outcomes = self._one(root / f"rerun-{i}", seed, nodeids, deadline)
            self.records.append(record)
            for nodeid in nodeids:
                got = outcomes.get(nodeid)
                matrix.record_rerun(nodeid, Rerun(seed, got.outcome, got.message, got.duration)
                                    if got else Rerun(seed, ERROR, self._missing(i, record)))
            counts = {o: sum(r.outcome == o for r in outcomes.values())
                      for o in ("failed", "passed", "error", "skipped")}
            say(f"re-run {i}: " + ", ".join(f"{n} {o}" for o, n in counts.items() if n)
                + f" in {record.duration:.1f} s" + (f"; {record.problem}" if record.problem
                                                     else "") + f" (log {record.log})")
        return self.records

    @staticmethod
    def _missing(i: int, record: RerunRecord) -> str:
        why = record.problem or "its report holds no outcome for this test"
        return f"re-run {i} (--mc-seed={record.seed}) did not judge it: {why}"

    def _one(self, directory: Path, seed: int, nodeids: list[str],
             deadline: float) -> tuple[RerunRecord, dict[str, Rerun]]:
        directory.mkdir(parents=True, exist_ok=True)
        report = directory / "report.json"
        outputs = {"--mc-report": str(report), "--basetemp": str(directory / "tmp"),
                   "--override-ini": f"cache_dir={directory / 'cache'}",
                   **self.outputs(directory)}
        argv = self.command.rerun_argv(seed, nodeids, outputs)
        log = directory / "output.log"
        supervisor = Supervisor(directory, name=f"mc-confirm {seed}")
        began = time.monotonic()
        started: str | None = None
        try:
            proc = supervisor.start("pytest re-run", argv, cwd=self.command.invocation_dir,
                                    log_path=log, stop_timeout=10.0)
            status = proc.wait_exit(deadline)
        except (OSError, ProcessStartError) as exc:
            status, started = None, f"could not start {argv[0]}: {exc}"
        finally:
            supervisor.stop_all()
        record = RerunRecord(seed, len(nodeids), status, time.monotonic() - began, str(log))
        if started:
            record.problem = started
            return record, {}
        if status is None:
            record.problem = f"did not finish within {deadline:.0f} s and was killed"
            return record, {}
        try:
            outcomes = reported_outcomes(json.loads(report.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
            record.problem = (f"exit status {status} and no readable report ({exc}); its "
                              f"output ends:\n{tail}")
            return record, {}
        return record, outcomes
