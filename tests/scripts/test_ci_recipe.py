"""The CI recipe (scripts/ci-recipe.sh, docs/ci.md) end to end against the installed Mooncake
0.3.13 wheel: a job per target with its shipped expectations exits 0 though the build FAILs
requirements, the merge step writes a schema-valid matrix whose columns are the jobs' own and
agree with the stored matrix run, the diff lands in the job summary; a planted regression (the
legacy reference profile judged against the RFC profile's expectations) exits 1 naming it.

A small selection (the identity suite: MR-7 FAILs on 0.3.13 and on the legacy profile, MR-8
passes) keeps it to about a minute. Without a usable wheel it is n/a, except under CI=true.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from pytest_mooncake.report.report_columns import columns
from pytest_mooncake.targets import resolve_target

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "scripts" / "ci-recipe.sh"
BASELINE = ROOT / "fixtures" / "reports" / "release.json"
SELECTION = ["suites/metadata/test_identity.py", "--mc-only=MR-7,MR-8", "-q", "-n", "0"]
DEADLINE = 420  # about a minute here; a recipe that hangs fails instead of stalling CI
SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())


def _require_wheel() -> None:
    spec = importlib.util.spec_from_file_location(
        "_mooncake_suites", ROOT / "tests" / "targets" / "test_mooncake_suites.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.require_wheel(resolve_target("mooncake").missing("engine"), os.environ)


def recipe(*args: str, summary: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHON": sys.executable, **env,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if summary is not None:
        environ["GITHUB_STEP_SUMMARY"] = str(summary)
    try:
        return subprocess.run(["bash", str(RECIPE), *args], cwd=ROOT, env=environ, text=True,
                              capture_output=True, timeout=DEADLINE, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the recipe did not finish in {DEADLINE}s: {exc.stdout}{exc.stderr}")


def test_the_recipe_gates_merges_and_diffs_a_real_build(tmp_path: Path) -> None:
    _require_wheel()
    out, summary = tmp_path / "out", tmp_path / "summary.md"
    done = recipe("all", str(out), str(BASELINE),
                  "mooncake mooncake-0.3.13.post1@ha-oplog",
                  "reference:legacy reference-legacy@ha-oplog", "--", *SELECTION,
                  summary=summary, MC_COLUMNS_EXPECT="release")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "== every job as expected" in log
    assert "0 regression, 0 changed" in log  # each job, and the merged matrix's check

    merged = json.loads((out / "matrix.json").read_text())
    jsonschema.validate(merged, SCHEMA)
    singles = {label: col for f in ("mooncake.json", "reference-legacy.json")
               for label, col in columns(json.loads((out / f).read_text())).items()}
    got = columns(merged)
    assert list(got) == ["mooncake", "reference:legacy"]
    for label, single in singles.items():
        assert got[label].seed == single.seed and got[label].version == single.version
        assert got[label].requirements == single.requirements  # verdict for verdict, test for test
    # the same columns of a full matrix run (the stored one) give the same verdicts, test for
    # test (a requirement's verdict may differ: the selection runs only some of its tests)
    stored = columns(json.loads(BASELINE.read_text()))
    for label, column in got.items():
        ran = column.test_verdicts()
        assert {"MR-7", "MR-8"} <= {req for req, _ in ran}, label
        before = stored[label].test_verdicts()
        both = {k: v for k, v in ran.items() if k in before}  # tests added since: not compared
        assert {"MR-7", "MR-8"} <= {req for req, _ in both}, label
        assert both == {k: before[k] for k in both}, label
    assert got["mooncake"].verdict("MR-7") == "FAIL"  # a known FAIL, expected: exit 0
    assert got["mooncake"].verdict("MR-8") == "pass"

    text = summary.read_text()
    assert text.startswith("## Conformance diff")
    assert "column 'reference' only in OLD" in text  # the baseline has the rfc column too
    assert (out / "diff.txt").read_text() in done.stdout

    # scripts/judge_mooncake.py renders the merged report as it renders a matrix run's
    spec = importlib.util.spec_from_file_location("judge_mooncake",
                                                  ROOT / "scripts" / "judge_mooncake.py")
    judge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge)
    region = judge.render(merged, judge.load_titles())
    assert "MR-7" in region and "0.3.13.post1" in region


def test_a_planted_regression_fails_the_job_and_is_named(tmp_path: Path) -> None:
    """reference:legacy lacks the instance identity the RFC profile has: judged against the RFC
    profile's expectations, its MR-7 FAIL is a regression."""
    done = recipe("job", "reference:legacy", "reference-rfc@ha-oplog", str(tmp_path),
                  *SELECTION[:1], "--mc-only=MR-7", *SELECTION[2:])
    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    assert "  regression: [reference:legacy] MR-7: expected pass, got FAIL" in log
    assert "1 regression, 0 changed, 0 unexpected pass" in log
    assert "== job reference:legacy: exit 1" in log


def test_a_wrong_call_is_a_usage_error(tmp_path: Path) -> None:
    done = recipe("nope")
    assert done.returncode == 2 and "scripts/ci-recipe.sh job TARGET EXPECT OUTDIR" in done.stderr
    done = recipe("all", str(tmp_path), str(BASELINE), "mooncake")
    assert done.returncode == 2 and "all: 'mooncake' is not 'TARGET EXPECT'" in done.stderr
    done = recipe("merge", str(tmp_path), str(BASELINE))
    assert done.returncode == 2 and f"merge: no reports in {tmp_path}" in done.stderr


def test_the_github_workflow_runs_the_recipe_with_shipped_expectations() -> None:
    """docs/ci/github-actions.yml cannot name an expectations file that is not shipped, nor
    drift from the script's commands."""
    import re

    from pytest_mooncake.schemas.shipped_files import shipped_names

    text = (ROOT / "docs" / "ci" / "github-actions.yml").read_text()
    names = re.findall(r"^\s+expect: (\S+)$", text, re.M)
    assert names and set(names) <= set(shipped_names("expectations")), names
    assert 'scripts/ci-recipe.sh job "${{ matrix.target }}" "${{ matrix.expect }}" reports' in text
    merge = re.search(r"scripts/ci-recipe.sh merge reports (\S+) (\S+)", text)
    assert merge and (ROOT / merge.group(1)).is_file()
    assert merge.group(2) in shipped_names("expectations")
