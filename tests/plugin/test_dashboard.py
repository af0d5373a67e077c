"""The dashboard (``python -m pytest_mooncake.report html``) shows a report's verdicts as they
are, opens a cell's tests, diffs two reports cell by cell, escapes what tests printed and loads
nothing from the network. The browser's view: tests/docs/test_dashboard_screenshots.py."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_mooncake.report import dashboard
from pytest_mooncake.report.dashboard_model import diff, grid

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "fixtures" / "reports" / "releases.json"
RELEASE = ROOT / "fixtures" / "reports" / "release.json"


class Page(HTMLParser):
    """Ids, in-page links, and anything that would load from elsewhere."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.external: list[str] = []
        self.tags: set[str] = set()
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        values = dict(attrs)
        if "id" in values:
            self.ids.add(values["id"])
        if tag == "a" and values.get("href", "").startswith("#") and values["href"] != "#":
            self.links.append(values["href"][1:])
        for key in ("src", "srcset", "data"):
            if key in values:
                self.external.append(f"{tag} {key}={values[key]}")
        if tag == "link":
            self.external.append(f"link {values}")


def flat_report(**overrides):
    doc = {
        "schema_version": 1, "started": "2026-12-02T10:00:00+00:00", "duration_s": 12.0,
        "seed": 77, "target": "reference", "target_version": "reference-engine 0.1.0 (rfc)",
        "summary": {}, "fail_on": {"rule": "na", "problems": ["[reference] CO-3 n/a: no means"]},
        "requirements": {
            "MR-1": {"verdict": "FAIL", "tests": [
                {"nodeid": "suites/metadata/test_cache.py::test_ttl", "outcome": "passed",
                 "duration_s": 1.5},
                {"nodeid": "suites/metadata/test_cache.py::test_stale", "outcome": "failed",
                 "duration_s": 2.25, "artifacts": ["/tmp/run/history-2.timeline.html"],
                 "message": "B served <script>alert(1)</script> & more; "
                 "see /tmp/run/history-1.timeline.html and /tmp/run/history-1.plot.png"}]},
            "CO-3": {"verdict": "n/a", "tests": [
                {"nodeid": "suites/rdma/test_x.py::test_release", "outcome": "skipped",
                 "duration_s": 0.0, "reason": "no controllable RDMA path",
                 "capability": "rdma_control"}]},
            "CO-9": {"verdict": "FAIL", "tests": [
                {"nodeid": "suites/rdma/test_x.py::test_explore", "outcome": "failed",
                 "duration_s": 3.0, "message": "invariant broken; replay with "
                 "--mc-replay=mcs1.abc123\nassert False"}]},
            "MP-6": {"verdict": "intermittent", "tests": [
                {"nodeid": "suites/master/test_f.py::test_soak", "outcome": "failed",
                 "duration_s": 9.0, "message": "lost 1 of 40"}]},
            "MP-7": {"verdict": "someday", "tests": [
                {"nodeid": "suites/master/test_f.py::test_reattach", "outcome": "passed",
                 "duration_s": 1.0}]},
        },
    }
    doc.update(overrides)
    return doc


def test_every_cell_of_the_stored_release_matrix_keeps_its_verdict():
    doc = json.loads(RELEASES.read_text())
    g = grid(doc, "releases.json")
    assert [c.title for c in g.columns] == ["reference", "reference:legacy", "0.3.10.post2",
                                            "0.3.11.post1", "0.3.12.post1", "0.3.13.post1", "0.3.14"]
    assert [f.family for f in g.families] == ["MR", "CO", "MP"]
    assert [r.req for r in g.families[0].rows][:3] == ["MR-1", "MR-2", "MR-3"]
    shown = {(row.pair, row.req, column.key): cell.verdict for row, column, cell in g.cells()}
    stored = {("", req, key): entry["verdict"] for key, col in doc["columns"].items()
              for req, entry in col["requirements"].items()}
    stored |= {(pair, req, key): entry["verdict"] for key, col in doc["columns"].items()
               for pair, p in col["pairs"].items() for req, entry in p["requirements"].items()}
    assert shown == stored
    mr1 = next(c for row, col, c in g.cells()
               if row.req == "MR-1" and not row.pair and col.title == "0.3.13.post1")
    assert mr1.label == "FAIL 1/8" and mr1.tests[0].outcome == "failed"
    assert mr1.tests[0].replay.startswith("python -m pytest -p pytest_mooncake 'suites/")
    assert mr1.tests[0].replay.endswith("--mc-matrix=releases --mc-seed=2122912013")


def test_a_cell_opens_its_tests_with_message_reason_duration_seed_and_replay(tmp_path):
    report = tmp_path / "run.json"
    report.write_text(json.dumps(flat_report()))
    [index] = dashboard.write([report], tmp_path / "site")
    html = index.read_text()
    page = Page(html)
    assert page.links and set(page.links) <= page.ids, "a cell links to a panel that is missing"
    assert "script" not in page.tags and not page.external, page.external
    assert not re.search(r"https?://", html), "the page names a network address"
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html
    mr1 = html[html.index('id="c0-0-MR-1"'):]
    mr1 = mr1[: mr1.index("</aside>")]
    assert mr1.index("test_stale") < mr1.index("test_ttl"), "the failed test comes first"
    assert "2.25 s" in mr1 and "seed 77" in mr1
    assert ("python -m pytest -p pytest_mooncake suites/metadata/test_cache.py::test_stale "
            "--mc-target=reference --mc-seed=77") in mr1
    for path in ("history-2.timeline.html", "history-1.timeline.html", "history-1.plot.png"):
        assert f'href="/tmp/run/{path}"' in mr1, path
    co3 = html[html.index('id="c0-0-CO-3"'):]
    assert "no controllable RDMA path" in co3[: co3.index("</aside>")] and "rdma_control" in co3
    assert "--mc-replay=mcs1.abc123" in html
    assert 'class="v-fail" href="#c0-0-MR-1">FAIL 1/2<' in html
    assert 'class="v-intermittent" href="#c0-0-MP-6">intermittent 1/1<' in html
    assert 'class="v-unknown" href="#c0-0-MP-7">someday<' in html
    assert "[reference] CO-3 n/a: no means" in html


def test_two_reports_diff_cell_by_cell_matching_a_renamed_column_by_version(tmp_path):
    before = flat_report()
    after = copy.deepcopy(before)
    after["requirements"]["MR-1"] = {"verdict": "pass", "tests": [
        {"nodeid": "suites/metadata/test_cache.py::test_ttl", "outcome": "passed", "duration_s": 1.0},
        {"nodeid": "suites/metadata/test_cache.py::test_stale", "outcome": "passed", "duration_s": 2.0}]}
    after["requirements"]["MR-2"] = {"verdict": "pass", "tests": [
        {"nodeid": "suites/metadata/test_io.py::test_no_io", "outcome": "passed", "duration_s": 1.0}]}
    after["target"] = "reference:rfc"           # the same build under another column name
    d = diff(grid(before, "a.json", "a"), grid(after, "b.json", "b"))
    assert d.renamed == {"reference:rfc": "reference"}
    changed = d.changes()
    assert [(c.before.verdict, c.after.verdict) for c in changed] == [("FAIL", "pass")]
    assert changed[0].label == "FAIL → pass"
    was, now = changed[0].test_changes()[0]
    assert (was.nodeid, was.outcome, now.outcome) == \
        ("suites/metadata/test_cache.py::test_stale", "failed", "passed")
    assert len(d.changes("added")) == 1 and not d.changes("removed")
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    written = dashboard.write([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "site")
    assert [p.name for p in written] == ["index.html", "report-1.html", "report-2.html"]
    html = written[0].read_text()
    page = Page(html)
    assert set(page.links) <= page.ids and "script" not in page.tags and not page.external
    assert "b.json</a>: 1</h2>" in html and "reference → reference:rfc" in html
    panel = html[html.index('id="d-0-MR-1"'):]
    assert "a.json: message" in panel[: panel.index("</aside>")], "the earlier failure is shown"
    assert re.search(r'<td class="cell changed"><a class="v-pass" href="#d-0-MR-1">FAIL → pass</a>', html)
    assert '<td class="cell added"><a class="v-pass" href="#d-0-MR-2">pass</a>' in html


def test_the_command_writes_the_pages_and_names_bad_input(tmp_path, capsys):
    out = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pytest_mooncake.report", "html", str(RELEASE),
                           str(RELEASES), "-o", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out / n) for n in ("index.html", "report-1.html", "report-2.html")]
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    for args, says in ((["missing.json"], "missing.json: no such report file"),
                       ([str(tmp_path / "bad.json")], "bad.json: not a JSON report"),
                       ([str(tmp_path / "other.json")], "other.json: not a pytest-mooncake report"),
                       ([str(RELEASE)] * 3, "give one report, or two to compare (got 3)")):
        assert dashboard.main([*args, "-o", str(out)]) == 2
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        dashboard.main([str(RELEASE)])
    assert exit_info.value.code == 2
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err
