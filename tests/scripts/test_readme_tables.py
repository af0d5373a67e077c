"""scripts/readme_tables.py: the README's deployment table and RFC-claims table are what the
stored reports give; --check catches a stale or missing region; the deployment table names each
column's profile and says in one line where the profile decides a verdict."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "scripts" / "readme_tables.py")
readme_tables = importlib.util.module_from_spec(spec)
sys.modules["readme_tables"] = readme_tables
spec.loader.exec_module(readme_tables)

STORED = json.loads((ROOT / readme_tables.REPORT).read_text())


def test_the_readme_holds_what_the_stored_reports_give():
    assert readme_tables.main(["--check"]) == 0, "run python scripts/readme_tables.py"


def test_check_fails_on_a_stale_region_and_a_rewrite_mends_only_the_region(tmp_path, monkeypatch,
                                                                         capsys):
    readme = tmp_path / "README.md"
    current = readme_tables.README.read_text()
    start = current.index(readme_tables.DEPLOYMENTS.start)
    stale = current.replace(current[start:current.index("| `reference` |", start)],
                            readme_tables.DEPLOYMENTS.start + "\nan old table\n", 1)
    readme.write_text(stale)
    monkeypatch.setattr(readme_tables, "README", readme)
    assert readme_tables.main(["--check"]) == 1
    assert "deployments table is stale; run python scripts/readme_tables.py" in \
        capsys.readouterr().err
    assert readme_tables.main([]) == 0
    assert readme.read_text() == current


def test_a_readme_without_the_markers_is_refused(tmp_path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# a README without regions\n")
    monkeypatch.setattr(readme_tables, "README", readme)
    assert readme_tables.main(["--check"]) == 2
    assert "readme-deployments:start" in capsys.readouterr().err
    assert readme.read_text() == "# a README without regions\n"


def test_every_column_is_named_with_its_profile_and_mp6_says_what_defaults_lose():
    region = readme_tables.deployments_region(STORED)
    for label in STORED["columns"]:
        assert f"| `{label}` |" in region
    assert "| `mooncake-non-cuda==0.3.13.post1@defaults` | defaults (no --enable_oplog) |" in region
    assert "| `mooncake-non-cuda==0.3.13.post1` | ha-oplog (--enable_oplog=true) |" in region
    assert ("- MP-6 on 0.3.13.post1: pass with ha-oplog; FAIL with defaults (0 of 30 objects "
            "after failover") in region


def test_a_difference_line_lists_every_profile_and_a_fails_first_words():
    column = {"requirements": {"MP-6": {"verdict": "pass", "tests": []},
                               "MR-1": {"verdict": "FAIL", "tests": []}}}

    def deployed(profile: str, verdict: str, message: str) -> dict:
        test = {"nodeid": "t", "outcome": "failed" if verdict == "FAIL" else "passed",
                "message": message}
        return {"deployment": {"build": "mooncake==9.9", "profile": {"name": profile}},
                "requirements": {"MP-6": {"verdict": verdict, "tests": [test]},
                                 "MR-1": {"verdict": "FAIL", "tests": []}}}

    lines = readme_tables.differing({
        "reference": column,
        "mooncake==9.9": deployed("ha-oplog", "pass", ""),
        "mooncake==9.9@defaults": deployed("defaults", "FAIL", "AssertionError: " + "x" * 200)})
    assert lines == ["MP-6 on 9.9: pass with ha-oplog; FAIL with defaults ("
                     + "x" * (readme_tables.MESSAGE_WORDS - 3) + "...)"]
