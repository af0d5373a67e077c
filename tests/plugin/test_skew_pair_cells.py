"""Version-skew pairs get their own cells in the conformance matrix and the JSON report, per
target column: which pair of an mc_skew matrix meets a requirement, not only whether all did."""

from __future__ import annotations

import json
import textwrap

import pytest

MATRIX = """
roles = ["writer", "reader"]
[implementations.reference]
[implementations."reference:legacy"]
target = "reference:legacy"
[[pairs]]
writer = "reference:legacy"
reader = "reference"
[[pairs]]
writer = "reference"
reader = "reference"
"""

SUITE = """
import pytest

@pytest.mark.mc_req("MR-17")
@pytest.mark.mc_skew("upgrade")
def test_rollout(mc_skew):
    assert mc_skew.implementation("writer").target == "reference", "old writer breaks it"

@pytest.mark.mc_req("MR-17")
def test_plain():
    pass
"""

OLD = "writer=reference:legacy-reader=reference"
NEW = "writer=reference-reader=reference"


def _project(pytester: pytest.Pytester) -> None:
    skew = pytester.path / "fixtures" / "skew"
    skew.mkdir(parents=True)
    (skew / "upgrade.toml").write_text(textwrap.dedent(MATRIX))
    pytester.makepyfile(SUITE)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_each_pair_has_its_own_verdict(pytester: pytest.Pytester, workers: list[str]) -> None:
    _project(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--mc-report=r.json", *workers)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "MR-17 * FAIL (1/3)*",
        "requirement  version-skew pair*reference*",
        f"MR-17        {NEW}  *pass (1)*",
        f"MR-17        {OLD}  FAIL (1/1)*",
    ])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["requirements"]["MR-17"]["verdict"] == "FAIL"
    pairs = doc["pairs"]
    assert list(pairs) == sorted([OLD, NEW])
    assert pairs[OLD]["requirements"]["MR-17"]["verdict"] == "FAIL"
    assert pairs[NEW]["requirements"]["MR-17"]["verdict"] == "pass"
    assert [t["nodeid"] for t in pairs[NEW]["requirements"]["MR-17"]["tests"]] == [
        f"test_each_pair_has_its_own_verdict.py::test_rollout[{NEW}]"]


def test_no_pair_section_without_skew_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.split("@pytest.mark.mc_req(\"MR-17\")\ndef test_plain")[0]
                        .replace('@pytest.mark.mc_skew("upgrade")\n', "")
                        .replace("mc_skew.implementation(\"writer\").target == \"reference\"",
                                 "True").replace("(mc_skew)", "()"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-report=r.json")
    result.assert_outcomes(passed=1)
    assert "version-skew pair" not in result.stdout.str()
    assert "pairs" not in json.loads((pytester.path / "r.json").read_text())
