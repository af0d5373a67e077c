"""mc_chaos in a pytest session: --mc-chaos-seconds, history and report paths shown on failure,
allure steps and the report's attachments."""

from __future__ import annotations

import json
from pathlib import Path

# pytester's inline runs drop the modules they imported, and numpy (under the report's
# matplotlib) cannot be loaded twice in one process: load the plotting stack here, once.
import matplotlib.backends.backend_agg  # noqa: F401
import matplotlib.figure  # noqa: F401
import pytest

SUITE = """
from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import bounded_recovery
from pytest_mooncake.chaos.nemesis import Fault

class Echo:
    def invoke(self, spec):
        return spec.value

def test_run(mc_chaos):
    fault = Fault("blink", "thing", inject=lambda: None, heal=lambda: None)
    result = mc_chaos.run(lambda w: Echo(), gen.kv(keys=2).stagger(0.02), [fault],
                          quiet=(0.01, 0.05), hold=(0.01, 0.05))
    # the option sets the run's length (a floor: a loaded machine may overrun it a little),
    # not the default 10 s
    print("HONOURED", 0.4 <= result.seconds < 10.0, "FAULTS", result.faults_injected)
    result.check(bounded_recovery(5.0)).assert_valid()
    assert FAIL is False, "made to fail"
"""


def test_chaos_seconds_option_and_history_on_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.replace("FAIL", "True"))
    result = pytester.runpytest("--mc-chaos-seconds=0.4", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "HONOURED True FAULTS" in out
    result.stdout.fnmatch_lines(["*Captured chaos history 1 (history-1.jsonl, seed *)*",
                                 '*"process": "nemesis"*'])
    result.stdout.fnmatch_lines(["*Captured chaos report 1*", "timeline: */history-1.timeline.html",
                                 "plot: */history-1.plot.png", "verdict: *valid",
                                 "recovery (heal -> first ok operation):", "fault * any worker *",
                                 "blink:thing *"])
    shown = next(line.split(": ", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("timeline: "))
    assert "blink:thing" in Path(shown).read_text()


def test_fault_injections_are_allure_steps(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.replace("FAIL", "False"))
    result = pytester.runpytest("--mc-chaos-seconds=0.3", "--alluredir=allure",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    docs = [json.loads(p.read_text()) for p in (pytester.path / "allure").glob("*-result.json")]
    steps = [s["name"] for d in docs for s in d.get("steps", [])]
    assert "nemesis: inject blink:thing" in steps and "nemesis: heal blink:thing" in steps
    attached = {a["type"]: a for d in docs for a in d.get("attachments", [])}
    assert attached["text/html"]["name"] == "chaos run 1: timeline"
    assert attached["image/png"]["name"] == "chaos run 1: latency and throughput"
    html = (pytester.path / "allure" / attached["text/html"]["source"]).read_text()
    assert "bounded-recovery" in html and "blink:thing" in html


def test_the_json_report_names_the_runs_timeline_and_plot(pytester: pytest.Pytester) -> None:
    """The report lists a chaos test's timeline and plot with the test (the dashboard links
    them), on a failing test and on a passing one alike."""
    pytester.makepyfile(SUITE.replace("def test_run(", "@pytest.mark.mc_req('MR-16')\ndef test_run(")
                        .replace("from pytest_mooncake", "import pytest\nfrom pytest_mooncake", 1)
                        .replace("FAIL", "False"))
    result = pytester.runpytest("--mc-chaos-seconds=0.3", "--mc-report=report.json",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    [test] = json.loads((pytester.path / "report.json").read_text())["requirements"]["MR-16"]["tests"]
    assert [Path(a).name for a in test["artifacts"]] == ["history-1.timeline.html", "history-1.plot.png"]
    assert all(Path(a).is_file() for a in test["artifacts"])
