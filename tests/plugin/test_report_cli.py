"""``python -m pytest_mooncake.report``: diff, merge, check and update on the stored reports of
real runs (fixtures/reports/), with the exit statuses docs/ci.md documents."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from pytest_mooncake.report.__main__ import COMMANDS, main
from pytest_mooncake.report.catalogue import load_catalogue
from pytest_mooncake.report.expectations import check_catalogue, load_expectations
from pytest_mooncake.report.report_columns import column_free_id, columns
from pytest_mooncake.schemas.shipped_files import shipped_names

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "fixtures" / "reports" / "releases.json"
RELEASE = ROOT / "fixtures" / "reports" / "release.json"
V13, V14 = "mooncake-non-cuda==0.3.13.post1", "mooncake-cuda13==0.3.14"
SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())


def cli(capsys, *args: str) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


def flat(doc: dict, label: str, seed: int) -> dict:
    """One column of a matrix report as a one-target report of its own run."""
    col = doc["columns"][label]
    return {"schema_version": doc["schema_version"], "started": doc["started"],
            "duration_s": 1.0, "seed": seed, "target": label, "target_version": col["version"],
            "summary": col["summary"], "requirements": col["requirements"],
            **({"pairs": col["pairs"]} if "pairs" in col else {}),
            "fail_on": {"rule": "never", "problems": []}}


def test_diff_of_the_stored_0_3_13_and_0_3_14_columns_lists_their_differences(capsys) -> None:
    status, out, _ = cli(capsys, "diff", RELEASES, RELEASES, "--column", "0.3.13,0.3.14")
    doc = json.loads(RELEASES.read_text())
    old, new = (doc["columns"][c]["requirements"] for c in (V13, V14))
    changed = {r for r in old if old[r]["verdict"] != new[r]["verdict"]}
    assert changed == {"MP-8", "MP-9"}  # what the stored runs say; each must be listed
    lines = out.splitlines()
    assert lines[0].startswith(f"{V13} (mooncake-transfer-engine-non-cuda 0.3.13.post1) -> {V14}")
    for req in changed:
        assert f"   {req:<7} {old[req]['verdict']} -> {new[req]['verdict']}  (newly pass)" in lines
    # per test: a test that passed on 0.3.13 and FAILs on 0.3.14, inside a FAIL requirement
    assert (" ! MR-1    suites/metadata/test_cache.py::test_remote_descriptor_is_refetched_after_"
            "the_ttl[etcd] pass -> FAIL  (newly FAIL)") in lines
    # per skew pair: the pair cells name the releases, so they come and go
    assert "   MP-8    [pair master=0.3.14-client=0.3.13.post1] - -> pass  (newly judged)" in lines
    assert lines[-1] == ("27 difference(s): 7 newly FAIL, 11 newly judged, 5 newly pass, "
                         "4 no longer judged; 7 worse")
    assert status == 1  # something got worse


def test_diff_exit_statuses_same_and_better(capsys) -> None:
    status, out, _ = cli(capsys, "diff", RELEASES, RELEASES)
    assert status == 0 and out.splitlines()[-1] == "no differences"
    # the reference's MP-7 FAILed in the stored release run and passed in the releases run
    status, out, _ = cli(capsys, "diff", RELEASE, RELEASES, "--column", "reference")
    assert status == 3, out
    assert "   MP-7    FAIL -> pass  (newly pass)" in out.splitlines()


def test_diff_as_markdown(capsys) -> None:
    status, out, _ = cli(capsys, "diff", RELEASES, RELEASES, "--column", "0.3.13,0.3.14",
                         "--format", "markdown")
    assert status == 1
    assert out.startswith("## Conformance diff\n\n27 difference(s)")
    assert "| | requirement | test or skew pair | old | new | change |" in out
    assert "| :x: | MR-1 | `suites/metadata/test_cache.py::test_a_zero_ttl_caches_nothing` | " \
           "pass | FAIL | newly FAIL |" in out


def test_verdicts_are_data_and_schema_2_is_read(tmp_path: Path, capsys) -> None:
    """A verdict this plugin does not give yet (``intermittent``, schema version 2) diffs and
    merges like any other; an unknown schema version is refused."""
    doc = json.loads(RELEASES.read_text())
    newer = copy.deepcopy(doc)
    newer["schema_version"] = 2
    newer["columns"][V13]["requirements"]["MR-2"]["verdict"] = "intermittent"
    (tmp_path / "v2.json").write_text(json.dumps(newer))
    status, out, _ = cli(capsys, "diff", RELEASES, tmp_path / "v2.json", "--column", V13)
    assert status == 1
    assert "   MR-2    pass -> intermittent  (became intermittent)" in out.replace(" ! ", "   ")
    assert cli(capsys, "merge", tmp_path / "v2.json", "-o", tmp_path / "m.json")[0] == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["schema_version"] == 2 and merged["summary"]["verdicts"]["intermittent"] == 1
    newer["schema_version"] = 3
    (tmp_path / "v3.json").write_text(json.dumps(newer))
    status, _, err = cli(capsys, "diff", RELEASES, tmp_path / "v3.json")
    assert status == 2 and "schema_version 3 is not one this reader knows (1, 2)" in err


def test_merge_of_single_column_reports_equals_those_columns_of_the_matrix(
        tmp_path: Path, capsys) -> None:
    doc = json.loads(RELEASES.read_text())
    for i, label in enumerate((V13, V14)):
        (tmp_path / f"{i}.json").write_text(json.dumps(flat(doc, label, 100 + i)))
    status, out, _ = cli(capsys, "merge", tmp_path / "0.json", tmp_path / "1.json",
                         "-o", tmp_path / "m.json", "--matrix", "two-releases")
    assert status == 0 and "2 column(s)" in out
    merged = json.loads((tmp_path / "m.json").read_text())
    jsonschema.validate(merged, SCHEMA)
    assert merged["matrix"] == "two-releases" and list(merged["columns"]) == [V13, V14]
    for i, label in enumerate((V13, V14)):
        col = merged["columns"][label]
        assert col["requirements"] == doc["columns"][label]["requirements"]
        assert col["pairs"] == doc["columns"][label]["pairs"]
        assert (col["version"], col["seed"]) == (doc["columns"][label]["version"], 100 + i)
    assert merged["seed"] == 100 and merged["duration_s"] == 2.0
    assert [m["seed"] for m in merged["merged_from"]] == [100, 101]
    # a merged matrix diffs as empty against the matrix it came from, column by column
    assert cli(capsys, "diff", RELEASES, tmp_path / "m.json", "--column", V13)[0] == 0
    # scripts/judge_mooncake.py reads it as it reads a matrix run
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import judge_mooncake
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert "0.3.14" in judge_mooncake.render(merged, judge_mooncake.load_titles())


PROOF = ROOT / "fixtures" / "reports" / "stability" / "proof-4aa8f2d"


def test_merge_keeps_each_runs_deployment_and_says_where_the_profiles_differ(
        tmp_path: Path, capsys) -> None:
    """Two one-target runs of one build, one per deployment profile (as a CI job per column
    makes them): the merged matrix names each column's profile and flags, and says in one line
    where the verdict depends on the profile (MP-6: the index after a failover)."""
    runs = [PROOF / f"mooncake_0.3.13.post1{p}-seed1101.json" for p in ("", "_defaults")]
    status, _, _ = cli(capsys, "merge", *runs, "-o", tmp_path / "m.json")
    assert status == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    jsonschema.validate(merged, SCHEMA)
    for run, label in zip(runs, merged["columns"], strict=True):
        assert merged["columns"][label]["deployment"] == json.loads(run.read_text())["deployment"]
    profiles = [merged["columns"][c]["deployment"]["profile"]["name"] for c in merged["columns"]]
    assert profiles == ["ha-oplog", "defaults"]
    [mp6] = [line for line in merged["profile_differences"] if line.startswith("MP-6 ")]
    assert mp6.startswith("MP-6 on mooncake-non-cuda==0.3.13.post1: pass with ha-oplog "
                          "(--enable_oplog=true); FAIL with defaults (no --enable_oplog): "), mp6
    assert re.search(r"(?<![0-9])0 of [0-9]+ objects after failover", mp6), mp6


def test_merge_refuses_a_column_from_two_runs(tmp_path: Path, capsys) -> None:
    status, _, err = cli(capsys, "merge", RELEASE, RELEASES, "-o", tmp_path / "m.json")
    assert status == 2
    assert f"column 'reference' is in both {RELEASE} and {RELEASES}" in err
    assert not (tmp_path / "m.json").exists()


def test_a_wrong_input_is_a_usage_error_through_python_dash_m(tmp_path: Path) -> None:
    """As a pipeline runs it (``python -m``), not through ``main()``: the command's error class
    must be the one the dispatcher catches (it was not: a traceback and exit 1)."""
    done = subprocess.run([sys.executable, "-m", "pytest_mooncake.report", "merge", str(RELEASE),
                           str(RELEASES), "-o", str(tmp_path / "m.json")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: column 'reference' is in both"), done.stderr
    assert "Traceback" not in done.stderr


def _rejudged_since_the_matrix_run() -> set[tuple[str, str]]:
    """(build version, requirement) pairs a later stored run judged (generate_expectations)."""
    gen = _generator()
    return {(column.version, req) for _, column, _ in gen.later_columns()
            for req, entry in column.requirements.items() if entry.get("verdict")}


def test_check_the_stored_runs_against_the_shipped_expectations(capsys) -> None:
    """The stored matrix run meets the shipped files except where a later stored run judged the
    requirement again (those results are the files' own: generate_expectations.py)."""
    status, out, _ = cli(capsys, "check", RELEASES, "--expect", "releases")
    later = _rejudged_since_the_matrix_run()
    versions = {label: column.version
                for label, column in columns(json.loads(RELEASES.read_text())).items()}
    for line in out.splitlines():
        found = re.match(r"^(regression|changed|unexpected pass): \[([^\]]+)\] ([A-Z]+-\d+):", line)
        if found:
            label, req = found.group(2).split("@")[0], found.group(3)
            assert (versions[label], req) in later, line
    assert status in (0, 1, 3), out
    # the stored release run caught the reference FAILing MP-7 once: a regression
    status, out, _ = cli(capsys, "check", RELEASE, "--expect", "release")
    assert status == 1
    assert out.splitlines()[0] == "regression: [reference] MP-7: expected pass, got FAIL"
    status, _, err = cli(capsys, "check", RELEASE, "--expect", "mooncake-0.3.13.post1@ha-oplog")
    assert status == 2 and "cannot judge 3 columns" in err


def test_update_round_trips_and_keeps_reasons(tmp_path: Path, capsys) -> None:
    out_file = tmp_path / "e.toml"
    status, _, _ = cli(capsys, "update", RELEASES, "--column", "0.3.14", "-o", out_file,
                       "--expect", "mooncake-0.3.13.post1@ha-oplog")
    assert status == 0
    updated = load_expectations(str(out_file)).single
    assert updated.of("MP-9").verdicts == ("pass",)
    assert updated.of("MR-1").reason == ("by default a cached remote descriptor is served for "
                                         "ever (no refresh)")  # 0.3.13's reason, still FAIL
    one = tmp_path / "one.json"
    one.write_text(json.dumps(flat(json.loads(RELEASES.read_text()), V14, 1)))
    assert cli(capsys, "check", one, "--expect", out_file)[0] == 0
    status, _, err = cli(capsys, "update", RELEASES, "-o", out_file)
    assert status == 2 and "name one with --column" in err


def test_the_shipped_expectations_are_those_of_the_stored_reports() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_expectations.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _generator():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import generate_expectations
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return generate_expectations


def _req(verdict: str, *tests: tuple[str, str]) -> dict:
    return {"verdict": verdict, "tests": [{"nodeid": n, "outcome": o} for n, o in tests]}


def test_a_later_run_overlays_the_matrix_run_requirement_by_requirement() -> None:
    overlay = _generator().overlay
    base = {"CO-9": _req("pass", ("a", "passed"), ("b", "passed")),
            "MP-8": _req("n/a", ("w", "skipped")),
            "MR-1": _req("FAIL", ("m", "failed"))}
    later = {"CO-9": _req("FAIL", ("b", "failed")),           # some of its tests, again
             "MP-8": _req("FAIL", ("w", "failed"), ("x", "failed")),  # all of them and more
             "MR-1": _req("pass", ("m", "passed"))}
    got = overlay(base, later)
    assert got["CO-9"]["verdict"] == "FAIL"
    assert {t["nodeid"] for t in got["CO-9"]["tests"]} == {"a", "b"}
    assert got["MP-8"] == later["MP-8"]
    assert got["MR-1"]["verdict"] == "pass"  # the failing test was judged again: it passed
    # a later pass of some tests leaves another test's FAIL standing
    assert overlay({"R": _req("FAIL", ("a", "failed"), ("b", "passed"))},
                   {"R": _req("pass", ("b", "passed"))})["R"]["verdict"] == "FAIL"


def test_a_defaults_file_never_mixes_ha_oplog_outcomes_into_what_it_judged() -> None:
    """The @defaults file starts from the ha-oplog run; a requirement its own profile judged
    takes only that run's tests (the ha-oplog planted-overlap FAIL is not a @defaults result)."""
    overlay = _generator().overlay
    base = {"MP-4": _req("FAIL", ("planted", "failed"), ("fresh", "passed")),
            "CO-1": _req("pass", ("c", "passed"))}
    proxies = set(base)
    got = overlay(base, {"MP-4": _req("n/a", ("fresh", "skipped"))}, proxies)
    assert got["MP-4"] == _req("n/a", ("fresh", "skipped"))
    assert got["CO-1"] == base["CO-1"] and proxies == {"CO-1"}


def test_a_later_runs_skew_pair_cells_reach_the_expectations_file() -> None:
    """A later stored run's pair cells overlay the matrix run's, as its requirements do: the
    restart-gap run (fixtures/reports/mr17-restart-gap.json) FAILs MR-17 for both of 0.3.14's
    rolling-upgrade pairs, so the file expects FAIL for each, not the matrix run's pass."""
    gen = _generator()
    (column,) = [c for label, c, profile, _ in gen.profiled_columns(RELEASES)
                 if label == "mooncake-cuda13==0.3.14" and profile == "ha-oplog"]
    assert column.pair_verdicts()[("MR-17", "old=0.3.13.post1-new=0.3.14")] == "FAIL"
    shipped = load_expectations("mooncake-0.3.14@ha-oplog").single
    assert shipped.pairs[("MR-17", "old=0.3.13.post1-new=0.3.14")].verdicts == ("FAIL",)
    assert shipped.pairs[("MR-17", "old=reference:legacy-new=target")].verdicts == ("FAIL",)


@pytest.mark.parametrize("release", ["mooncake-0.3.10.post2", "mooncake-0.3.11.post1",
                                     "mooncake-0.3.12.post1", "mooncake-0.3.13.post1",
                                     "mooncake-0.3.14"])
def test_a_releases_two_profiles_expect_the_same_engine_verdicts(release) -> None:
    """The profiles differ in the masters' flags only, so no CO or MR requirement (engines, no
    master) is expected to judge otherwise under @defaults: a @defaults file that kept the
    matrix run's CO-9 pass after the explorations found the deadlock made every @defaults run
    report a regression."""
    oplog = load_expectations(f"{release}@ha-oplog").single
    defaults = load_expectations(f"{release}@defaults").single
    differ = [f"{r}: {oplog.of(r).verdicts} vs {defaults.of(r).verdicts}"
              for r in load_catalogue().requirements if r.split("-")[0] in ("CO", "MR")
              and oplog.of(r).verdicts != defaults.of(r).verdicts]
    assert not differ, differ


@pytest.mark.parametrize("name", shipped_names("expectations"))
def test_every_shipped_expectations_file_names_known_requirements_and_verdicts(name) -> None:
    expectations = load_expectations(name)
    check_catalogue(expectations, load_catalogue())
    assert expectations.files()


def test_a_test_id_drops_the_matrix_column_wherever_it_sits() -> None:
    assert column_free_id("s.py::t[mooncake-cuda13==0.3.14-etcd]", "mooncake-cuda13==0.3.14") == "s.py::t[etcd]"
    assert column_free_id("s.py::t[reference]", "reference") == "s.py::t"
    assert column_free_id("s.py::t[master=a-client=b-reference:legacy-other-major]",
                   "reference:legacy") == "s.py::t[master=a-client=b-other-major]"
    assert column_free_id("s.py::t[etcd]", "mooncake") == "s.py::t[etcd]"
    found = columns(json.loads(RELEASES.read_text()))
    assert set(found[V13].test_verdicts()) & set(found[V14].test_verdicts())


def test_a_command_is_a_module_with_help_arguments_and_run(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out
    done = subprocess.run([sys.executable, "-m", "pytest_mooncake.report", "diff", "nope.json",
                           str(RELEASES)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "error: nope.json: no such report" in done.stderr


@pytest.mark.parametrize(("profile", "name"), [("rfc", "reference-rfc@ha-oplog"),
                                               ("legacy", "reference-legacy@ha-oplog")])
def test_the_reference_expectations_are_the_proof_of_detections_verdicts(profile, name) -> None:
    """verdicts/reference.toml says which verdicts prove detection (tests/test_detection_proof.py
    runs the suites for it); the reference's shipped expectations, observed in the stored run,
    must say the same for every requirement of the three RFCs."""
    from pytest_mooncake.report.catalogue import tomllib

    table = tomllib.loads((ROOT / "pytest_mooncake" / "data" / "verdicts" / "reference.toml")
                          .read_text())[profile]
    expected = load_expectations(name).single
    wrong = [f"{r}: reference.toml {table.get(r, table['default'])}, {name} "
             f"{expected.of(r).text()}" for r in load_catalogue().requirements
             if r.split("-")[0] in ("MR", "CO", "MP")
             and (table.get(r, table["default"]),) != expected.of(r).verdicts]
    assert not wrong, "\n".join(wrong)


def test_the_examples_of_docs_ci_md_are_valid_expectations_files(tmp_path: Path) -> None:
    import re

    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "ci.md").read_text(), re.S)
    assert len(blocks) == 2  # one target, and a matrix's [columns]
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block)
        check_catalogue(load_expectations(str(path)), load_catalogue())


def test_a_reason_the_runs_no_longer_give_is_dropped_and_the_entry_written_inline() -> None:
    entry = _generator().requirement_entry
    was_fail = {"verdict": "pass", "reason": "0 of 40 objects after failover"}
    first = entry(was_fail, "pass", ("FAIL",), lambda: "unused")
    assert first == "pass"  # as a requirement written for the first time
    assert entry(first, "pass", ("pass",), lambda: "unused") == "pass"  # the second run: same
    kept = entry({"verdict": "pass", "reason": "r", "issue": "#7"}, "pass", ("FAIL",), str)
    assert kept == {"verdict": "pass", "issue": "#7"}
    assert entry("FAIL", "FAIL", None, lambda: "seen: x") == {"verdict": "FAIL",
                                                               "reason": "seen: x"}
    assert entry({"verdict": "FAIL", "reason": "mine"}, "FAIL", ("FAIL",), str) == {
        "verdict": "FAIL", "reason": "mine"}
