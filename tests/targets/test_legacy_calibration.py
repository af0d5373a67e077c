"""reference:legacy claims to reproduce Mooncake 0.3.13: wherever the stored release run judges
a requirement on both (neither n/a), their verdicts agree, or a reviewed line of
pytest_mooncake/data/verdicts/legacy-vs-0.3.13.toml says why they differ (and is removed once they agree)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_mooncake.report.catalogue import tomllib

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "fixtures" / "reports" / "release.json"
EXPLAINED = ROOT / "pytest_mooncake" / "data" / "verdicts" / "legacy-vs-0.3.13.toml"
LEGACY, BUILD = "reference:legacy", "mooncake"


def both_judged_differences(doc: dict) -> dict[str, tuple[str, str]]:
    """Requirement -> (legacy verdict, build verdict) where both judged it and they differ."""
    legacy = doc["columns"][LEGACY]["requirements"]
    build = doc["columns"][BUILD]["requirements"]
    out = {}
    for req in sorted(set(legacy) & set(build)):
        pair = (legacy[req]["verdict"], build[req]["verdict"])
        if "n/a" not in pair and pair[0] != pair[1]:
            out[req] = pair
    return out


def test_legacy_agrees_with_the_real_0_3_13_or_says_why():
    doc = json.loads(REPORT.read_text())
    assert "0.3.13" in doc["judged"]["versions"][BUILD], (
        f"the stored release run judged {doc['judged']['versions'][BUILD]}, not 0.3.13: "
        f"legacy is calibrated against 0.3.13")
    explained = tomllib.loads(EXPLAINED.read_text())["differs"]
    differs = both_judged_differences(doc)
    unexplained = [f"{r}: legacy {a}, 0.3.13 {b}" for r, (a, b) in differs.items()
                   if r not in explained]
    assert not unexplained, (
        "reference:legacy and the real 0.3.13 disagree with no line in "
        f"{EXPLAINED.relative_to(ROOT)}:\n  " + "\n  ".join(unexplained))
    stale = [f"{r}: the file says legacy {e['legacy']} / 0.3.13 {e['mooncake']}, the run "
             f"{differs[r][0] if r in differs else 'agrees or one is n/a'}"
             for r, e in explained.items()
             if differs.get(r) != (e["legacy"], e["mooncake"])]
    assert not stale, (f"{EXPLAINED.relative_to(ROOT)} explains differences the stored run no "
                       f"longer shows:\n  " + "\n  ".join(stale))
    for req, entry in explained.items():
        assert entry.get("why", "").strip(), f"{req}: a line without a reason"


def test_a_difference_without_a_line_is_reported():
    doc = {"columns": {LEGACY: {"requirements": {"MR-1": {"verdict": "pass"},
                                                 "MR-2": {"verdict": "n/a"},
                                                 "MR-3": {"verdict": "FAIL"}}},
                       BUILD: {"requirements": {"MR-1": {"verdict": "FAIL"},
                                                "MR-2": {"verdict": "FAIL"},
                                                "MR-3": {"verdict": "FAIL"}}}}}
    assert both_judged_differences(doc) == {"MR-1": ("pass", "FAIL")}
