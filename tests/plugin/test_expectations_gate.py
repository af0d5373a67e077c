"""``--mc-expect``: a run exits 0 when every verdict is the expected one, 1 on a regression (said
first) or another change; an unexpected pass fails only with ``--mc-expect-strict``;
``--mc-expect-update`` writes the file and round-trips; bad files are usage errors naming the
field; a matrix needs per-column expectations."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from pytest_mooncake.report.expectations import load_expectations

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())

SUITE = """
import os
import pytest

BROKEN = set(os.environ.get("BROKEN", "").split(","))


@pytest.mark.mc_req("MR-1")
def test_mr1(mc_target):
    assert "MR-1" not in BROKEN and mc_target.label != "reference:legacy", "MR-1 broke"


@pytest.mark.mc_req("MR-2")
def test_mr2():
    assert "MR-2" not in BROKEN, "MR-2 broke"


@pytest.mark.mc_req("MR-3")
@pytest.mark.parametrize("store", ["etcd", "http"])
def test_mr3(store):
    assert f"MR-3-{store}" not in BROKEN, f"MR-3 broke on {store}"


@pytest.mark.mc_req("MR-7")
@pytest.mark.mc_requires("version_skew")
def test_mr7_na():
    pass
"""

EXPECTED = """
# header comment kept by --mc-expect-update
default = "pass"

[requirements]
MR-7 = "n/a"

[requirements.MR-2]
verdict = "FAIL"
reason = "known: no forced refresh"
issue = "https://github.com/kvcache-ai/Mooncake/issues/1"
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("expect.toml").write_text(EXPECTED)
    monkeypatch.setenv("BROKEN", "MR-2")
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--mc-seed=1", *args)


def test_every_result_as_expected_exits_0_though_a_test_failed(suite) -> None:
    assert run(suite).ret == pytest.ExitCode.TESTS_FAILED  # without: pytest's own status
    result = run(suite, "--mc-expect=expect.toml", "--mc-report=r.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["expectations --mc-expect=expect.toml:",
                                 "  4 result(s) as expected; 0 regression, 0 changed, "
                                 "0 unexpected pass"])
    doc = json.loads((suite.path / "r.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["expectations"]["mismatches"] == [] and doc["expectations"]["matched"] == 4


def test_a_regression_fails_the_run_and_is_said_first(suite, monkeypatch) -> None:
    monkeypatch.setenv("BROKEN", "MR-2,MR-1")
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.stdout.lines
    section = lines.index("expectations --mc-expect=expect.toml:")
    assert lines[section + 1] == "  regression: [reference] MR-1: expected pass, got FAIL"
    assert section < next(i for i, x in enumerate(lines) if x.startswith("requirement "))
    result.stdout.fnmatch_lines(["  a change on purpose? record it with --mc-expect-update, "
                                 "or edit expect.toml"])


def test_a_requirement_missing_from_the_file_is_expected_to_pass(suite, monkeypatch) -> None:
    monkeypatch.setenv("BROKEN", "MR-2,MR-3-http")
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  regression: [[]reference[]] MR-3: expected pass, got FAIL"])


def test_an_unexpected_pass_fails_only_when_strict(suite, monkeypatch) -> None:
    monkeypatch.setenv("BROKEN", "")
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["  unexpected pass: [[]reference[]] MR-2: expected FAIL, got pass "
                                 "(known: no forced refresh; https://github.com/*/issues/1)"])
    assert run(suite, "--mc-expect=expect.toml",
               "--mc-expect-strict").ret == pytest.ExitCode.TESTS_FAILED
    suite.makeini("[pytest]\nmc_expect = expect.toml\nmc_expect_strict = true\n")
    assert run(suite).ret == pytest.ExitCode.TESTS_FAILED  # the ini keys do the same


def test_a_set_of_verdicts_and_a_per_test_expectation(suite, monkeypatch) -> None:
    suite.path.joinpath("expect.toml").write_text(EXPECTED.replace(
        'verdict = "FAIL"', 'verdict = ["FAIL", "pass"]') + """
[requirements.MR-3]
verdict = ["pass", "FAIL"]
tests = { "test_suite.py::test_mr3[http]" = "pass" }
""")
    monkeypatch.setenv("BROKEN", "MR-3-etcd")  # MR-2 passes (in its set); MR-3 FAILs (in its set)
    assert run(suite, "--mc-expect=expect.toml").ret == pytest.ExitCode.OK
    monkeypatch.setenv("BROKEN", "MR-3-http")  # same requirement verdict, but the listed test
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  regression: [[]reference[]] MR-3 test_suite.py::test_mr3[[]http[]]: "
                                 "expected pass, got FAIL"])


def test_became_na_is_a_change_that_fails(suite) -> None:
    suite.path.joinpath("expect.toml").write_text(EXPECTED.replace('MR-7 = "n/a"', 'MR-7 = "pass"'))
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  changed: [[]reference[]] MR-7: expected pass, got n/a"])


def test_a_failed_test_naming_no_requirement_still_fails(suite) -> None:
    suite.makepyfile(test_plain="def test_plain():\n    assert False\n")
    result = run(suite, "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  failed without naming a requirement *: test_plain.py::test_plain"])


def test_update_writes_the_run_keeps_reasons_and_round_trips(suite, monkeypatch) -> None:
    monkeypatch.setenv("BROKEN", "MR-3-http")  # MR-2 now passes, MR-3 now FAILs
    result = run(suite, "--mc-expect=expect.toml", "--mc-expect-update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = (suite.path / "expect.toml").read_text()
    assert text.startswith("# header comment kept by --mc-expect-update\n")
    updated = load_expectations(str(suite.path / "expect.toml")).single
    assert updated.of("MR-2").verdicts == ("pass",)
    assert updated.of("MR-2").reason == "known: no forced refresh"  # kept
    assert updated.of("MR-2").issue.endswith("/issues/1")
    assert updated.of("MR-3").verdicts == ("FAIL",) and updated.of("MR-7").verdicts == ("n/a",)
    assert run(suite, "--mc-expect=expect.toml").ret == pytest.ExitCode.OK  # round trip
    assert run(suite, "--mc-expect=new.toml", "--mc-expect-update").ret == pytest.ExitCode.OK
    assert run(suite, "--mc-expect=new.toml").ret == pytest.ExitCode.OK  # a new file, too
    monkeypatch.setenv("BROKEN", "")
    assert run(suite, "--mc-expect=new.toml").ret == pytest.ExitCode.OK  # MR-3 fixed: reported
    assert run(suite, "--mc-expect=new.toml", "--mc-expect-strict").ret == 1


def test_update_of_a_shipped_file_writes_the_projects_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="""
import pytest

@pytest.mark.mc_req("MR-1")
def test_mr1():
    pass
""")
    result = run(pytester, "--mc-expect=reference-legacy@ha-oplog", "--mc-expect-update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    own = pytester.path / "fixtures" / "expectations" / "reference-legacy@ha-oplog.toml"
    assert load_expectations(str(own)).single.of("MR-1").verdicts == ("pass",)
    shipped = load_expectations("reference-legacy@ha-oplog").single
    assert shipped.of("MR-1").verdicts == ("FAIL",)  # the package's file is untouched
    assert load_expectations("reference-legacy@ha-oplog", [pytester.path]).single.path == own


@pytest.mark.parametrize(("text", "message"), [
    ('[requirements]\nMR-1 = "passes"\n', "*field 'requirements.MR-1*unknown verdict 'passes'*"),
    ('[requirements]\nZZ-1 = "pass"\n', "*unknown requirement(s) ZZ-1*"),
    ('[requirements]\nMR-1 = { verdict = "pass", why = "x" }\n', "*unknown field*"),
    ('[columns]\nreference = "nope"\n', "*--mc-expect=nope: no such file*"),
])
def test_a_bad_file_is_a_usage_error_naming_the_field(pytester, text, message) -> None:
    pytester.path.joinpath("bad.toml").write_text(text)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(pytester, "--mc-expect=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_strict_or_update_without_a_file_is_a_usage_error(pytester) -> None:
    result = run(pytester, "--mc-expect-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-expect-strict needs --mc-expect=FILE|NAME*"])


def test_a_matrix_takes_expectations_per_column_label(suite, monkeypatch) -> None:
    suite.path.joinpath("legacy.toml").write_text('[requirements]\nMR-1 = "FAIL"\nMR-2 = "FAIL"\n'
                                                  'MR-7 = "n/a"\n')
    suite.path.joinpath("matrix.toml").write_text(
        '[columns]\nreference = "expect.toml"\n"reference:legacy" = "legacy.toml"\n')
    args = ("--mc-matrix=reference-profiles", "--mc-report=m.json")
    result = run(suite, *args, "--mc-expect=matrix.toml")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    jsonschema.validate(json.loads((suite.path / "m.json").read_text()), SCHEMA)
    # the reference's file against the legacy column: its MR-1 FAIL is a regression
    suite.path.joinpath("matrix.toml").write_text(
        '[columns]\nreference = "expect.toml"\n"reference:legacy" = "expect.toml"\n')
    result = run(suite, *args, "--mc-expect=matrix.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  regression: [[]reference:legacy[]] MR-1: expected pass, got FAIL"])
    result = run(suite, *args, "--mc-expect=expect.toml")  # one target's file, two columns
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*one-target expectations file cannot judge 2 columns*[[]columns[]]*"])


def test_a_columns_file_missing_a_column_of_the_run_is_refused_before_any_test(pytester) -> None:
    """The release matrix gated by the releases matrix's file: its "mooncake" columns are in
    no [columns] entry, so every FAIL of theirs would be re-run and fail the gate. Refused at
    start, naming the columns and the shipped file that lists them all."""
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(pytester, "--mc-matrix=release", "--mc-expect=releases")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--mc-expect=releases has no expectations for column(s) mooncake, mooncake@defaults "
        "(its [[]columns[]] lists reference, reference:legacy, mooncake-non-cuda==0.3.10.post2,*"
        "; the shipped file(s) listing every column of this run: --mc-expect=release"])


def test_under_xdist_the_controller_judges(suite, monkeypatch) -> None:
    assert run(suite, "-n", "2", "--mc-expect=expect.toml").ret == pytest.ExitCode.OK
    monkeypatch.setenv("BROKEN", "MR-2,MR-1")
    result = run(suite, "-n", "2", "--mc-expect=expect.toml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  regression: [[]reference[]] MR-1: expected pass, got FAIL"])


def test_a_run_that_judged_no_requirement_keeps_pytests_status(pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = run(pytester, "--mc-expect=new.toml", "--mc-expect-update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert not (pytester.path / "new.toml").exists()  # nothing judged, nothing written
