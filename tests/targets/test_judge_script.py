"""scripts/judge_mooncake.py renders the docs' judging section (docs/reference/release-matrix.md) from a JSON report alone and
touches nothing outside its markers (no suite run here)."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from pytest_mooncake.report.marked_region import MarkedRegionError

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("judge_mooncake",
                                                  ROOT / "scripts" / "judge_mooncake.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


judge = load_script()

REPORT = {
    "target": "reference",
    "seed": 4242,
    "requirements": {},
    "columns": {
        "reference": {"requirements": {
            "MR-1": {"verdict": "pass", "tests": [
                {"nodeid": "suites/metadata/test_cache.py::test_ttl[reference]",
                 "outcome": "passed"}]},
            "MR-7": {"verdict": "pass", "tests": [
                {"nodeid": "suites/metadata/test_identity.py::test_id[reference]",
                 "outcome": "passed"}]},
        }},
        "reference:legacy": {"requirements": {
            "MR-1": {"verdict": "FAIL", "tests": [
                {"nodeid": "suites/metadata/test_cache.py::test_ttl[reference:legacy]",
                 "outcome": "failed", "message": "AssertionError: stale"}]},
            "MR-7": {"verdict": "FAIL", "tests": [
                {"nodeid": "suites/metadata/test_identity.py::test_id[reference:legacy]",
                 "outcome": "failed", "message": "AssertionError: no id"}]},
        }},
        "mooncake": {"requirements": {
            "MR-1": {"verdict": "n/a", "tests": [
                {"nodeid": "suites/metadata/test_cache.py::test_ttl[mooncake]",
                 "outcome": "skipped", "reason": "no TTL | knob in 0.3.13"}]},
            "MR-7": {"verdict": "FAIL", "tests": [
                {"nodeid": "suites/metadata/test_identity.py::test_id[mooncake-etcd]",
                 "outcome": "failed",
                 "message": "AssertionError: A published no instance_id; MR-7 requires every "
                            "process to publish one\nassert None is not None"},
                {"nodeid": "suites/metadata/test_identity.py::test_other[mooncake]",
                 "outcome": "passed"}]},
        }},
    },
    "judged": {
        "date": "2026-11-29 11:00 UTC",
        "versions": {"reference": "reference-engine 0.1.0 (rfc)",
                     "reference:legacy": "reference-engine 0.1.0 (legacy)",
                     "mooncake": "mooncake-transfer-engine-non-cuda 0.3.13.post1"},
        "build": "mooncake",
    },
}
TITLES = {"MR-1": "remote descriptor cached at most TTL", "MR-7": "instance_id per process"}
PAGE = f"""# Project

Text above, with a code span `{judge.START}`-like words but not the marker line.

## Judging a Mooncake release

{judge.START}
(old generated text)
{judge.END}

## After

Hand-written text | with a pipe, kept byte for byte.
"""


def test_render_has_the_table_fail_lines_and_na_reasons():
    text = judge.render(REPORT, TITLES)
    assert ("| requirement | title | reference | reference:legacy | mooncake 0.3.13.post1 |"
            in text)
    assert "| MR-1 | remote descriptor cached at most TTL | pass (1) | **FAIL** (1/1) | n/a |" \
        in text
    assert "| MR-7 | instance_id per process | pass (1) | **FAIL** (1/1) | **FAIL** (1/2) |" \
        in text
    assert ("- **MR-7** `test_id[etcd]`: A published no instance_id\n" in text)
    assert "- MR-1: no TTL \\| knob in 0.3.13" in text
    assert "judged 2026-11-29 11:00 UTC, seed 4242 (rerun with `--mc-seed=4242`)" in text
    assert "1 FAIL, 1 n/a of 2 requirements" in text
    for command in ("--mc-target=mooncake ", "--mc-target=mooncake:/opt/mooncake",
                    "--mc-target=docker:kvcacheai/mooncake:0.3.13",
                    "--mc-target=cluster:example", "--mc-matrix=release"):
        assert command in text
    assert judge.render(copy.deepcopy(REPORT), TITLES) == text


def test_a_passing_build_has_no_fail_section_and_a_flat_report_renders():
    doc = copy.deepcopy(REPORT)
    doc["columns"]["mooncake"]["requirements"]["MR-7"] = {"verdict": "pass", "tests": [
        {"nodeid": "t.py::test_id[mooncake]", "outcome": "passed"}]}
    assert "did where it fails" not in judge.render(doc, TITLES)
    flat = {"target": "mooncake", "seed": 1,
            "requirements": REPORT["columns"]["mooncake"]["requirements"]}
    text = judge.render(flat, TITLES)
    assert "| requirement | title | mooncake |" in text and "**FAIL** (1/2)" in text


def test_a_version_2_report_renders_intermittent_cells_and_explains_them():
    """Schema version 2 adds the intermittent verdict; a version 1 report (``REPORT``, the
    stored ones) renders without it and without its explanation."""
    assert "intermittent" not in judge.render(REPORT, TITLES)
    doc = copy.deepcopy(REPORT)
    doc["schema_version"] = 2
    doc["columns"]["mooncake"]["requirements"]["MR-7"] = {
        "verdict": "intermittent",
        "confirmation": {"failed": 1, "judged": 3, "ratio": "1/3", "runs": [], "summary": ""},
        "tests": [{"nodeid": "t.py::test_id[mooncake]", "outcome": "failed", "message": "late"}]}
    text = judge.render(doc, TITLES)
    assert "| MR-7 | instance_id per process | pass (1) | **FAIL** (1/1) | **intermittent** 1/3 |" \
        in text
    assert "- **intermittent k/N**: a test of it failed and, re-run" in text
    assert "1 intermittent, 1 n/a of 2 requirements" in text


def test_failure_lines_drop_exception_types_and_introspection():
    assert judge.what_it_did("Failed: B could not write. MR-16 requires recovery") == \
        "B could not write"
    assert judge.what_it_did("x" * 500).endswith("...")
    assert judge.what_it_did(None) == "(the report holds no failure message)"
    assert judge.test_name("s.py::t[old=a-new=target-mooncake]", "mooncake") == \
        "t[old=a-new=target]"
    assert judge.test_name("s.py::t[reference:legacy-http]", "reference:legacy") == "t[http]"


def test_only_the_marked_region_changes_and_rewriting_is_idempotent():
    region = judge.render(REPORT, TITLES)
    once = judge.MARKERS.replace(PAGE, region)
    head = PAGE[: PAGE.index(f"\n{judge.START}\n") + len(judge.START) + 2]
    tail = PAGE[PAGE.index(f"\n{judge.END}\n") + 1:]
    assert once.startswith(head) and once.endswith(tail)
    assert "(old generated text)" not in once and region in once
    assert judge.MARKERS.replace(once, region) == once
    with pytest.raises(MarkedRegionError, match=f"no line {judge.END}"):
        judge.MARKERS.replace(PAGE.replace(judge.END, ""), region)
    with pytest.raises(MarkedRegionError, match=f"2 lines {judge.START}"):
        judge.MARKERS.replace(PAGE + judge.START + "\n", region)
    with pytest.raises(MarkedRegionError):  # unlike the RDMA region's, never appended
        judge.MARKERS.replace("# no markers\n", region)


def test_check_and_no_run_modes(tmp_path, capsys):
    page, report = tmp_path / "page.md", tmp_path / "report.json"
    page.write_text(PAGE)
    report.write_text(json.dumps(REPORT))
    args = ["--page", str(page), "--report", str(report)]
    assert judge.main(["--check", *args]) == 1
    assert page.read_text() == PAGE
    assert judge.main(["--no-run", *args]) == 0
    written = page.read_text()
    assert written.split(f"\n{judge.START}\n")[0] == PAGE.split(f"\n{judge.START}\n")[0]
    assert written.split(f"\n{judge.END}\n")[1] == PAGE.split(f"\n{judge.END}\n")[1]
    assert judge.main(["--check", *args]) == 0
    assert judge.main(["--check", "--page", str(page), "--report",
                       str(tmp_path / "absent.json")]) == 2
    capsys.readouterr()


def test_the_committed_page_matches_the_committed_report():
    """The page's region names the stored report it was rendered from, and is that report's
    rendering (``--check`` without a mode reads the report the region names)."""
    source = judge.rendered_from(judge.PAGE.read_text())
    assert source is not None and source.exists(), f"the page's region names no stored report: {source}"
    assert judge.main(["--check"]) == 0, "run scripts/judge_mooncake.py --no-run"


def test_check_and_no_run_read_the_report_the_region_names(tmp_path, monkeypatch, capsys):
    reports = tmp_path / "fixtures" / "reports"
    reports.mkdir(parents=True)
    (reports / "release.json").write_text(json.dumps(REPORT))
    monkeypatch.setattr(judge, "ROOT", tmp_path)
    monkeypatch.setattr(judge, "RELEASES_REPORT", reports / "releases.json")
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert judge.main(["--no-run", "--page", str(page), "--target", "mooncake",
                       "--report", str(reports / "release.json")]) == 0
    assert "from fixtures/reports/release.json;" in page.read_text()
    assert judge.main(["--check", "--page", str(page)]) == 0
    assert judge.main(["--no-run", "--page", str(page)]) == 0
    (reports / "release.json").write_text(json.dumps({**REPORT, "seed": 1}))
    assert judge.main(["--check", "--page", str(page)]) == 1
    capsys.readouterr()


def test_profiles_of_one_build_are_named_per_column_with_the_difference_line():
    """Two deployment profiles of one build (fixtures/reports/profiles.json, a real run): each
    column says how it was deployed, and a requirement whose verdict differs between them gets
    its one line."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "reports" /
                      "profiles.json").read_text())
    text = judge.render(doc, TITLES)
    assert "`0.3.13.post1@defaults`: mooncake-transfer-engine-non-cuda 0.3.13.post1; " \
           "CUDA: not linked; deployed as defaults (no --enable_oplog)" in text
    assert "deployed as ha-oplog (--enable_oplog=true)" in text
    assert "Verdicts that depend on the deployment profile:" in text
    assert ("- MP-6 on mooncake-non-cuda==0.3.13.post1: pass with ha-oplog (--enable_oplog=true); "
            "FAIL with defaults (no --enable_oplog): 0 of 30 objects after failover") in text


def test_judging_one_build_judges_it_also_with_its_own_defaults(tmp_path):
    matrix = Path(judge.matrix_argument("mooncake==0.3.13.post1", tmp_path)).read_text()
    assert 'target = "mooncake==0.3.13.post1"' in matrix
    assert 'target = "mooncake==0.3.13.post1@defaults"' in matrix
    given = Path(judge.matrix_argument("mooncake==0.3.13.post1@ha-snapshot", tmp_path)).read_text()
    assert "@defaults" not in given and "@ha-snapshot" in given


def test_cells_a_later_stored_run_judged_again_are_listed_under_the_table():
    """The stored release matrix ran before the restart-gap run FAILed MR-17 on 0.3.14: the
    page names that cell (and its pairs) with the verdict expected since; a report of no
    shipped matrix lists nothing."""
    doc = json.loads((ROOT / "fixtures" / "reports" / "releases.json").read_text())
    again = judge.judged_again(doc)
    assert any(line.startswith("MR-17 on 0.3.14: pass in this run, FAIL since") for line in again)
    assert any(line.startswith("MR-17 [pair old=0.3.13.post1-new=0.3.14] on 0.3.14: pass in "
                               "this run, FAIL since") for line in again)
    assert not any(line.startswith("MR-17 on 0.3.13") for line in again)
    page = judge.render(doc, judge.load_titles())
    assert "Judged again since this run" in page
    assert judge.judged_again(REPORT) == []
    assert "Judged again since this run" not in judge.render(REPORT, judge.load_titles())
