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

A test that failed on a counterexample (it saw the build break an invariant under a recorded
interleaving, ``verdict_rule``) is not re-run: its requirement is FAIL whatever a re-run shows,
and the report keeps its replay token.

With ``witnesses`` (``--mc-confirm-only=witnesses``) the re-runs go first to one failed test
per failed cell, the one that took least time (a test failing in several cells stands for all
of them). A cell whose witness failed in every run is FAIL, whatever its other failed tests
would do, so those are left at their one run; the other cells' failed tests are then re-run
with the same seeds. Every requirement's verdict is the one re-running all would give; the
re-runs cost the witnesses' time where the failures reproduce.
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
from pytest_mooncake.report.verdict_rule import ERROR, FAILED, PASSED
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
                                         float(t.get("duration_s", 0.0)),
                                         t.get("counterexample"))
    return out


def _requirement_maps(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    holders = list((doc.get("columns") or {}).values()) or [doc]
    for holder in holders:
        yield holder.get("requirements") or {}
        for cell in (holder.get("pairs") or {}).values():
            yield cell.get("requirements") or {}


def failed_cells(matrix: ConformanceMatrix, nodeid: str) -> list[tuple[str, str]]:
    """The cells (requirement, column or pair) in which ``nodeid`` failed in the run."""
    return [(req, key) for req, key in matrix.cells()
            if any(t.nodeid == nodeid and t.outcome == FAILED for t in matrix.tests(req, key))]


def witness_tests(matrix: ConformanceMatrix, nodeids: list[str],
                  spent: dict[str, float]) -> list[str]:
    """One failed test per failed cell, the one that took least time (then by node id); a test
    already chosen for another cell stands for every cell it failed in."""
    chosen: list[str] = []
    wanted = set(nodeids)
    for req, key in matrix.cells():
        failed = [t.nodeid for t in matrix.tests(req, key)
                  if t.outcome == FAILED and t.nodeid in wanted]
        if failed and not any(n in chosen for n in failed):
            chosen.append(min(failed, key=lambda n: (spent.get(n, 0.0), n)))
    return sorted(chosen)


def confirmed_cells(matrix: ConformanceMatrix, chosen: list[str]) -> dict[tuple[str, str], str]:
    """Cell -> the witness that failed in every run of it (so the cell is FAIL by the verdict
    rule, ``verdict_of_runs``: failed, and never passed)."""
    out: dict[tuple[str, str], str] = {}
    for req, key in matrix.cells():
        for t in matrix.tests(req, key):
            if t.nodeid in chosen and FAILED in t.outcomes and PASSED not in t.outcomes:
                out.setdefault((req, key), t.nodeid)
    return out


class ConfirmationRuns:
    """The re-runs of one session (``count`` of them; 0: none)."""

    def __init__(self, command: PytestCommand, count: int, workdir: Callable[[], Path],
                 outputs: Callable[[Path], dict[str, str]] | None = None,
                 leave: Callable[[ConformanceMatrix], dict[str, str]] | None = None,
                 witnesses: bool = False):
        self.command = command
        self.count = count
        self.witnesses = witnesses
        """Re-run one failed test per failed cell first (``--mc-confirm-only=witnesses``)."""
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
        found = {n: t for n, t in matrix.counterexample_tests().items() if n not in self.left}
        if found:
            self.left.update({n: f"found a counterexample (--mc-replay={token}): FAIL whatever "
                                 f"a re-run shows (an interleaving that breaks the invariant "
                                 f"refutes it); not re-run" for n, token in found.items()})
            say(f"not re-run: {len(found)} failed test(s) that found a counterexample (FAIL "
                f"whatever a re-run shows)")
        nodeids = [n for n in nodeids if n not in self.left]
        if not nodeids:
            return []
        spent = {t.nodeid: t.duration for req, key in matrix.cells()
                 for t in matrix.tests(req, key) if t.outcome == FAILED}
        root = self.workdir()
        seeds = rerun_seeds(matrix.seed, self.count)
        if not self.witnesses:
            self._rounds(matrix, nodeids, seeds, spent, root, say)
            return self.records
        chosen = witness_tests(matrix, nodeids, spent)
        say(f"witnesses: {len(chosen)} of {len(nodeids)} failed test(s), one per failed cell "
            f"(--mc-confirm-only=witnesses)")
        self._rounds(matrix, chosen, seeds, spent, root, say)
        confirmed = confirmed_cells(matrix, chosen)
        rest, left = [], {}
        for nodeid in nodeids:
            if nodeid in chosen:
                continue
            cells = failed_cells(matrix, nodeid)
            if all(cell in confirmed for cell in cells):
                by = sorted({confirmed[cell] for cell in cells})
                left[nodeid] = (f"its FAIL in {', '.join(f'{r} [{k}]' for r, k in cells)} is "
                                f"confirmed by {', '.join(by)} (failed in every run); not re-run "
                                f"under --mc-confirm-only=witnesses")
            else:
                rest.append(nodeid)
        self.left.update(left)
        if rest:
            say(f"{len(rest)} failed test(s) of cells no witness confirmed, re-run with the "
                f"same seeds")
            self._rounds(matrix, rest, seeds, spent, root, say)
        say(f"not re-run: {len(left)} failed test(s) of cells a witness confirmed FAIL")
        return self.records

    def _rounds(self, matrix: ConformanceMatrix, nodeids: list[str], seeds: list[int],
                spent: dict[str, float], root: Path, say: Callable[[str], None]) -> None:
        """Re-run ``nodeids`` once per seed and fold each outcome into the matrix."""
        deadline = BASE_DEADLINE + DEADLINE_FACTOR * sum(spent.get(n, 0.0) for n in nodeids)
        for i, seed in enumerate(seeds, 1):
            n = len(self.records) + 1
            say(f"re-run {i} of {self.count}: {len(nodeids)} failed test(s) with "
                f"--mc-seed={seed} ...")
            record, outcomes = self._one(root / f"rerun-{n}", seed, nodeids, deadline)
            self.records.append(record)
            for nodeid in nodeids:
                got = outcomes.get(nodeid)
                matrix.record_rerun(nodeid, got if got else
                                    Rerun(seed, ERROR, self._missing(n, record)))
            counts = {o: sum(r.outcome == o for r in outcomes.values())
                      for o in ("failed", "passed", "error", "skipped")}
            say(f"re-run {i}: " + ", ".join(f"{k} {o}" for o, k in counts.items() if k)
                + f" in {record.duration:.1f} s" + (f"; {record.problem}" if record.problem
                                                     else "") + f" (log {record.log})")

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
