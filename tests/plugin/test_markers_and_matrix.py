"""mc_req / mc_requires markers and the conformance matrix in terminal and JSON."""

import json

import pytest

SUITE = """
import pytest

@pytest.mark.mc_req("MR-1")
def test_pass():
    pass

@pytest.mark.mc_req("MR-2")
def test_fail():
    assert False, "observed the wrong thing"

@pytest.mark.mc_req("MR-2")
def test_pass_same_req():
    pass

@pytest.mark.mc_req("CO-3")
@pytest.mark.mc_requires("version_skew")
def test_na():
    pass

@pytest.mark.mc_req("MP-1", "MP-2")
def test_two_reqs():
    pass

def test_unmarked():
    pass
"""


def test_matrix_in_terminal(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--mc-seed=11")
    result.assert_outcomes(passed=4, failed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*mooncake conformance matrix*",
        "target: reference (*)    seed: 11",
        "requirement*title*reference*",
        "MR-1 *pass (1)*",
        "MR-2 *FAIL (1/2)*",
        "CO-3 *n/a (1 reason)*",
        "MP-1 *pass (1)*",
        "MP-2 *pass (1)*",
        "verdicts: 3 pass, 1 FAIL, 1 n/a",
        "  n/a CO-3 [[]reference[]]: *version_skew*",
    ])


def test_json_report_shape(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    pytester.runpytest("--mc-seed=123", "--mc-report=report.json")
    doc = json.loads((pytester.path / "report.json").read_text())
    assert set(doc) == {"schema_version", "started", "duration_s", "seed", "target",
                        "target_version", "summary", "requirements", "fail_on", "reruns"}
    assert doc["target"] == "reference"
    assert doc["target_version"].startswith("reference-engine ")
    assert doc["seed"] == 123
    assert set(doc["requirements"]) == {"MR-1", "MR-2", "CO-3", "MP-1", "MP-2"}
    [test] = doc["requirements"]["MR-1"]["tests"]
    assert doc["requirements"]["MR-1"]["verdict"] == "pass"
    assert test["nodeid"] == "test_json_report_shape.py::test_pass"
    assert test["outcome"] == "passed" and test["duration_s"] >= 0
    assert doc["summary"] == {"requirements": 5,
                              "verdicts": {"pass": 3, "FAIL": 1, "intermittent": 0, "n/a": 1,
                                           "error": 0},
                              "tests": {"passed": 3, "failed": 1, "skipped": 1, "error": 0}}
    mr2 = doc["requirements"]["MR-2"]
    assert mr2["verdict"] == "FAIL"
    assert sorted(t["outcome"] for t in mr2["tests"]) == ["failed", "passed"]
    failed = next(t for t in mr2["tests"] if t["outcome"] == "failed")
    assert "observed the wrong thing" in failed["message"]
    assert all("message" not in t for t in mr2["tests"] if t["outcome"] == "passed")
    co3 = doc["requirements"]["CO-3"]
    assert co3["verdict"] == "n/a"
    assert co3["tests"][0]["outcome"] == "skipped"
    assert "version_skew" in co3["tests"][0]["reason"]


def test_setup_error_is_not_a_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.fixture
        def broken():
            raise RuntimeError("cannot start")
        @pytest.mark.mc_req("MR-4")
        def test_x(broken):
            pass
    """)
    result = pytester.runpytest("--mc-report=r.json")
    result.stdout.fnmatch_lines(["MR-4 *error (1/1)*"])
    assert json.loads((pytester.path / "r.json").read_text())["requirements"]["MR-4"]["verdict"] == "error"


def test_unknown_requirement_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MR-99")
        def test_x():
            pass
        @pytest.mark.mc_req()
        def test_y():
            pass
    """)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*unknown requirement 'MR-99' in mc_req (MR IDs run MR-1..MR-18)*",
        "*test_y: mc_req needs at least one requirement ID*",
    ])


def test_unknown_capability_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_requires("warp_drive")
        def test_x():
            pass
    """)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown capability 'warp_drive' in mc_requires (known: engine*"])


def test_target_lacks_raised_in_a_test_is_na(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MP-3")
        def test_x(mc_target):
            mc_target.rdma(verbs="pyverbs:mlx5_0")
    """)
    result = pytester.runpytest()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["MP-3 *n/a (1 reason)*"])


def test_no_requirements_collected_still_prints_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("--mc-seed=3")
    result.stdout.fnmatch_lines([
        "*mooncake conformance matrix*",
        "target: reference (*)    seed: 3",
        "no collected test names a requirement*",
    ])


def test_allure_labels(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("CO-4")
        def test_x():
            pass
    """)
    result = pytester.runpytest_subprocess("--alluredir=allure", "-p", "allure_pytest")
    result.assert_outcomes(passed=1)
    results = [json.loads(p.read_text()) for p in (pytester.path / "allure").glob("*-result.json")]
    labels = {(lab["name"], lab["value"]) for lab in results[0]["labels"]}
    assert ("feature", "CO-4 — stale completions never mutate the slice") in labels
    assert any(name == "epic" and value.startswith("CO") for name, value in labels)
    assert {"name": "target", "value": "'reference'"} in results[0]["parameters"] or any(
        p["name"] == "target" and "reference" in p["value"] for p in results[0]["parameters"])


def test_xdist_matrix_matches_serial(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    pytester.runpytest_subprocess("--mc-seed=5", "--mc-report=serial.json")
    pytester.runpytest_subprocess("--mc-seed=5", "--mc-report=par.json", "-n", "2")
    serial = _stable(json.loads((pytester.path / "serial.json").read_text()))
    par = _stable(json.loads((pytester.path / "par.json").read_text()))
    assert serial == par


def _stable(doc: dict) -> dict:
    """The report without what differs between any two runs: times, durations and where the
    re-runs of failed tests left their output."""
    doc = {k: v for k, v in doc.items() if k not in ("started", "duration_s")}
    for entry in doc.get("requirements", {}).values():
        for test in entry["tests"]:
            test.pop("duration_s")
            for run in test.get("runs", []):
                run.pop("duration_s")
    for rerun in doc.get("reruns", {}).get("runs", []):
        rerun.pop("duration_s")
        rerun.pop("log")
    return doc


def test_matrix_run_has_a_column_per_target(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", cols='[[column]]\ntarget = "reference"\n[[column]]\ntarget = "reference:legacy"\n')
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MR-7")
        def test_profile(mc_target):
            assert mc_target.label == "reference", "only rfc publishes instance_id"
        @pytest.mark.mc_req("MR-2")
        def test_no_target():
            pass
    """)
    result = pytester.runpytest("--mc-matrix=cols.toml", "--mc-report=m.json", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*test_profile[[]reference[]] PASSED*",
        "*test_profile[[]reference:legacy[]] FAILED*",
        "requirement*reference*reference:legacy*",
        "MR-7 *pass (1)*FAIL (1/1)*",
    ])
    doc = json.loads((pytester.path / "m.json").read_text())
    assert doc["columns"]["reference:legacy"]["requirements"]["MR-7"]["verdict"] == "FAIL"
    assert doc["columns"]["reference"]["requirements"]["MR-7"]["verdict"] == "pass"


@pytest.mark.parametrize(("content", "message"), [
    (None, "*--mc-matrix=nosuch.toml: no such file*"),
    ("[[column]]\nname = 1\n", "*--mc-matrix=*nosuch.toml: field 'column[[]0[]].target': missing*"),
    ("[[column]]\ntarget = 3\n", "*nosuch.toml: field 'column[[]0[]].target': expected a string, got 3*"),
    ("column = []\n", "*nosuch.toml: field 'column': must not be empty*"),
    ("[[column]]\ntarget = \"bogus\"\n", "*unknown target 'bogus'*"),
    ("not toml [", "*not valid TOML*"),
])
def test_bad_matrix_files(pytester: pytest.Pytester, content, message) -> None:
    if content is not None:
        pytester.makefile(".toml", nosuch=content)
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--mc-matrix=nosuch.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_only_selects_tests_by_requirement(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--mc-only=MP-2,mr-1", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*4 deselected*"])
    result = pytester.runpytest("--mc-only=MR-99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-only: unknown requirement(s) MR-99*"])
