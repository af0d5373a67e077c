"""``mc_chaos``: run a workload and a nemesis for ``--mc-chaos-seconds``, seeded by ``mc_seed``.

Example::

    def test_kv_survives_kills(mc_chaos, mc_processes):
        server = mc_processes.start("kv", [...], ready=port_open(port))
        result = mc_chaos.run(lambda w: KvClient(port), gen.kv(keys=16).stagger(0.005),
                              faults=[nemesis.process_kill(server)], final=gen.final_reads(16))
        result.check(no_lost_acks, no_phantom_reads).assert_valid()

The history of every run is written as JSON lines under the test's temp dir and shown (tail)
and attached to allure when the test fails; beside it an HTML timeline and a latency/throughput
plot (``report``), redrawn whenever the test checks the run, attached to allure, and their
paths printed when the test fails. Progress lines go to the log (live with ``-v``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.chaos.generator import Generator, Workload
from pytest_mooncake.chaos.history import History
from pytest_mooncake.chaos.nemesis import Fault, Nemesis
from pytest_mooncake.chaos.report import RunReport
from pytest_mooncake.chaos.runner import ChaosResult, ChaosRunError, run_chaos
from pytest_mooncake.logs import attach_log

log = logging.getLogger("pytest_mooncake.chaos")


class ChaosFixture:
    """Runs chaos for one test; ``seconds`` defaults to ``--mc-chaos-seconds``."""

    def __init__(self, request: pytest.FixtureRequest, seed: int, seconds: float, workdir: Path):
        self.request = request
        self.seed = seed
        self.seconds = seconds
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runs = 0
        self.reports: list[RunReport] = []

    def run(self, client_for: Callable[[int], Any], workload: Generator,
            faults: Sequence[Fault] = (), *, seconds: float | None = None, workers: int = 3,
            max_ops: int | None = None, final: Generator | None = None,
            quiet: tuple[float, float] = (0.5, 2.0), hold: tuple[float, float] = (0.5, 2.0),
            final_timeout: float = 10.0, join_timeout: float = 10.0,
            recovery: float = 0.0) -> ChaosResult:
        """One chaos run (see ``runner.run_chaos``); raises ``ChaosRunError`` if it could not
        finish cleanly."""
        self.runs += 1
        seed = self.seed + self.runs - 1
        path = self.workdir / f"history-{self.runs}.jsonl"
        history = History()
        attach_log(self.request, f"chaos history {self.runs} ({path.name}, seed {seed})", path)
        report = RunReport(path, f"chaos run {self.runs}",
                           [("test", self.request.node.nodeid), ("seed", str(seed))])
        self.reports.append(report)
        attach_log(self.request, f"chaos report {self.runs}", report.text)
        nemesis = Nemesis(faults, seed, quiet=quiet, hold=hold) if faults else None
        result: ChaosResult | None = None
        try:
            result = run_chaos(
                client_for, Workload(workload, seed), seconds=seconds or self.seconds,
                workers=workers, max_ops=max_ops, nemesis=nemesis, final=final,
                final_timeout=final_timeout, join_timeout=join_timeout, history=history,
                progress=self._progress, recovery=recovery,
            )
            return result
        except ChaosRunError as exc:
            result = exc.result
            raise
        finally:
            history.to_jsonl(path)
            report.follow(result, history, workers)

    def _progress(self, line: str) -> None:
        log.info(line)
        config = self.request.config
        if config.get_verbosity() <= 0:
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"  {line}")


@pytest.fixture
def mc_chaos(request: pytest.FixtureRequest, mc_config: Any, mc_seed: int,
             tmp_path: Path) -> Iterator[ChaosFixture]:
    """Chaos runs for this test: ``mc_chaos.run(client_for, workload, faults, final=...)``."""
    fixture = ChaosFixture(request, mc_seed, mc_config.chaos_seconds, tmp_path / "chaos")
    yield fixture
    for report in fixture.reports:
        report.attach()  # a version no check attached (the run was never judged, or failed)
