"""The report files of one chaos run, next to its history: an HTML timeline and a PNG plot.

``history-1.jsonl`` gets ``history-1.timeline.html`` (self-contained: verdict, faults and
recovery, timeline, the plot inline) and ``history-1.plot.png``. They are written when the run
ends and again whenever the test judges the run (``ChaosResult.check``), so they always show
the latest verdict; each version is attached to allure (a no-op unless a report directory is
set). ``text()`` is what a failing test prints: the paths, the verdict and the recovery table.
A report that cannot be drawn is logged and said in ``text()``; it never hides the test's own
outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_mooncake.chaos.checkers import Verdict
from pytest_mooncake.chaos.history import History
from pytest_mooncake.chaos.recovery import recovery_times
from pytest_mooncake.chaos.timeline import VERDICT_WORD, Page, overall, render, violations
from pytest_mooncake.chaos.windows import fault_windows

if TYPE_CHECKING:
    from pytest_mooncake.chaos.runner import ChaosResult

log = logging.getLogger("pytest_mooncake.chaos")


def report_paths(history_path: Path) -> tuple[Path, Path]:
    """(timeline, plot) beside ``history_path``."""
    stem = history_path.with_suffix("")
    return stem.with_name(stem.name + ".timeline.html"), stem.with_name(stem.name + ".plot.png")


def write_report(history: History, history_path: Path, *, title: str,
                 workers: int | None = None, verdicts: Sequence[Verdict] = (),
                 meta: Sequence[tuple[str, str]] = (), errors: Sequence[str] = ()
                 ) -> tuple[Path, Path]:
    """Draw and write both files; returns their paths."""
    from pytest_mooncake.chaos.plot import render_png

    html_path, png_path = report_paths(history_path)
    ops = history.ops
    calls = history.calls()
    windows = fault_windows(ops)
    recovery = recovery_times(ops, workers)
    named = violations(verdicts)
    word = VERDICT_WORD.get(overall(verdicts), overall(verdicts))
    png = render_png(calls, windows, recovery, named, title=f"{title}: {word}")
    counts = history.counts()
    end = max((op.time for op in ops), default=0) / 1e9
    page = Page(title=title, calls=calls, workers=workers, windows=windows, recovery=recovery,
                verdicts=verdicts, errors=errors, plot_png=png, violating=named,
                meta=[*meta, ("ops", f"{counts['invoke']} ({counts['ok']} ok, "
                                     f"{counts['fail']} fail, {counts['info']} info)"),
                      ("length", f"{end:.2f}s"), ("faults", str(len(windows))),
                      ("history", history_path.name)])
    png_path.write_bytes(png)
    html_path.write_text(render(page), encoding="utf-8")
    return html_path, png_path


class RunReport:
    """Keeps one run's report files current with its verdicts; see the module docstring."""

    def __init__(self, history_path: Path, title: str, meta: Sequence[tuple[str, str]] = ()):
        self.history_path = history_path
        self.html, self.plot = report_paths(history_path)
        self.title = title
        self.meta = list(meta)
        self.result: ChaosResult | None = None
        self.error: str | None = None
        self._version = 0
        self._attached = 0

    def follow(self, result: ChaosResult | None, history: History,
               workers: int | None) -> None:
        """Write the report now and again after every ``result.check``."""
        self.result = result
        if result is not None:
            result.report = self
            result.on_check.append(lambda r: self._write(r.history, r.workers, r.verdicts,
                                                         r.errors, attach=True))
        self._write(history, workers, (), result.errors if result else (), attach=False)

    def _write(self, history: History, workers: int | None, verdicts: Sequence[Verdict],
               errors: Sequence[str], attach: bool) -> None:
        try:
            write_report(history, self.history_path, title=self.title, workers=workers,
                         verdicts=verdicts, meta=self.meta, errors=errors)
            self.error = None
        except Exception as exc:  # a report must not hide the test's own outcome
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("chaos report %s could not be drawn: %s", self.html, self.error)
            return
        self._version += 1
        if attach:
            self.attach()

    def attach(self) -> None:
        """Attach the current files to allure (the test's report, or the fixture's teardown
        when called from there)."""
        if self._attached == self._version or self.error is not None:
            return
        self._attached = self._version
        try:
            import allure
        except ImportError:
            return
        try:
            allure.attach.file(str(self.html), name=f"{self.title}: timeline",
                               attachment_type=allure.attachment_type.HTML)
            allure.attach.file(str(self.plot), name=f"{self.title}: latency and throughput",
                               attachment_type=allure.attachment_type.PNG)
        except Exception as exc:  # allure's listener may have closed the test already
            log.debug("could not attach the chaos report to allure: %s", exc)

    def text(self) -> str:
        """What a failing test prints about this run."""
        if self.error is not None:
            return f"the chaos report could not be drawn: {self.error}\nhistory: {self.history_path}"
        if not self.html.exists():
            return f"no chaos report was written (the run did not start?); history: " \
                   f"{self.history_path}"
        lines = [f"timeline: {self.html}", f"plot:     {self.plot}"]
        result = self.result
        if result is not None:
            verdict = overall(result.verdicts)
            bad = sorted({r.name for v in result.verdicts for r in v.results
                          if r.valid is not True})
            lines.append(f"verdict:  {VERDICT_WORD.get(verdict, verdict)}"
                         + (f" ({', '.join(bad)})" if bad else ""))
            lines.append("recovery (heal -> first ok operation):")
            lines.append(result.recovery.table())
        return "\n".join(lines)
