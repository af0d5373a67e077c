"""Deployment profiles: ``--mc-target=SPEC@PROFILE`` parsing, the master settings each profile
adds, the ``deployment`` record in the header and the JSON report, and the one-line difference
between two profiles of one build."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources

import jsonschema
import pytest

from pytest_mooncake.report.deployment_seen import SEEN_PROPERTY, SeenDeployments
from pytest_mooncake.report.profile_differences import profile_differences
from pytest_mooncake.targets import UnknownTarget, resolve_target, target_identity
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.profile_strategies import (
    PROFILES,
    UnknownProfile,
    profile_named,
    split_profile,
)

SCHEMA = json.loads(resources.files("pytest_mooncake").joinpath("data/report.schema.json")
                    .read_text())

WITH_OPLOG = MasterFlags(dict.fromkeys((
    "enable_ha", "etcd_endpoints", "cluster_id", "rpc_port", "metrics_port", "enable_oplog",
    "enable_snapshot", "enable_snapshot_restore", "snapshot_interval_seconds",
    "snapshot_object_store_type"), ""), "build-with-oplog", "mooncake_master --help")
"""The master flags of a build like 0.3.13 (``--help`` lists them; values do not matter)."""
WITHOUT_OPLOG = MasterFlags(dict.fromkeys((
    "enable_ha", "etcd_endpoints", "cluster_id", "port", "metrics_port"), ""),
    "build-without-oplog", "mooncake_master --help")
"""Like 0.3.11: no --enable_oplog, no snapshot restore."""


@pytest.mark.parametrize(("spec", "split"), [
    ("mooncake==0.3.13.post1@defaults", ("mooncake==0.3.13.post1", "defaults")),
    ("mooncake@ha-oplog", ("mooncake", "ha-oplog")),
    ("mooncake:/opt/build@ha-snapshot", ("mooncake:/opt/build", "ha-snapshot")),
    ("docker:img@sha256:0123abcd", ("docker:img@sha256:0123abcd", None)),
    ("reference:legacy", ("reference:legacy", None)),
])
def test_split_profile(spec, split):
    assert split_profile(spec) == split


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(UnknownProfile) as err:
        profile_named("oplog", "mooncake@oplog")
    text = str(err.value)
    assert "--mc-target=mooncake@oplog: unknown deployment profile 'oplog'" in text
    for name in PROFILES:
        assert name in text


def test_target_identity_names_the_profile_unless_default():
    assert target_identity("mooncake==0.3.13.post1@defaults") == \
        "mooncake-non-cuda==0.3.13.post1@defaults"
    assert target_identity("mooncake==0.3.13.post1@ha-oplog") == \
        target_identity("mooncake==0.3.13.post1") == "mooncake-non-cuda==0.3.13.post1"
    with pytest.raises(UnknownTarget, match="known profiles: defaults"):
        target_identity("mooncake==0.3.13.post1@nope")


def test_reference_and_cluster_targets_take_no_profile():
    with pytest.raises(UnknownTarget, match="variants .* not deployment profiles"):
        resolve_target("reference@defaults")
    with pytest.raises(UnknownTarget, match="is deployed as its file says"):
        resolve_target("cluster:example@defaults")


def test_defaults_adds_nothing_and_honours_what_the_test_asks():
    defaults = PROFILES["defaults"]
    assert defaults.master_settings(WITH_OPLOG, None) == {}
    assert defaults.master_settings(WITH_OPLOG, True) == {"enable_oplog": True}
    assert defaults.describe(WITH_OPLOG)["master_flags"] == []


def test_ha_oplog_turns_the_oplog_on_where_the_build_has_it():
    oplog = PROFILES["ha-oplog"]
    assert oplog.master_settings(WITH_OPLOG, None) == {"enable_oplog": True}
    assert oplog.master_settings(WITH_OPLOG, False) == {"enable_oplog": False}
    assert oplog.master_settings(WITHOUT_OPLOG, None) == {}
    assert oplog.flag_text(WITH_OPLOG) == "--enable_oplog=true"


def test_ha_snapshot_needs_snapshot_restore():
    snapshot = PROFILES["ha-snapshot"]
    assert snapshot.lacks(WITH_OPLOG) is None
    settings = snapshot.master_settings(WITH_OPLOG, None)
    assert settings["enable_oplog"] is False and settings["enable_snapshot_restore"] is True
    why = snapshot.lacks(WITHOUT_OPLOG)
    assert "build-without-oplog has no master flag --enable_snapshot_restore" in why
    assert snapshot.describe(WITHOUT_OPLOG)["lacks"] == why


def test_ha_oplog_short_lease_adds_the_lease_flag_only_where_the_build_has_it():
    short = PROFILES["ha-oplog-short-lease"]
    with_lease = MasterFlags({**WITH_OPLOG.flags, "ha_leader_lease_ttl_sec": ""},
                             "build-with-lease", "mooncake_master --help")
    assert short.lacks(with_lease) is None
    assert short.master_settings(with_lease, None) == {"enable_oplog": True,
                                                       "ha_leader_lease_ttl_sec": 2}
    assert short.master_settings(with_lease, False)["enable_oplog"] is False
    assert short.describe(with_lease)["master_flags"] == ["--enable_oplog=true",
                                                          "--ha_leader_lease_ttl_sec=2"]
    why = short.lacks(WITH_OPLOG)
    assert why == ("profile ha-oplog-short-lease: build-with-oplog has no master flag "
                   "--ha_leader_lease_ttl_sec (probed: mooncake_master --help)")
    assert short.describe(WITH_OPLOG)["lacks"] == why


def _column(profile: str, verdict: str, message: str = "") -> dict:
    test = {"nodeid": "suites/master/test_promotion.py::test_x", "duration_s": 1.0,
            "outcome": "passed" if verdict == "pass" else "failed"}
    if message:
        test["message"] = message
    return {"deployment": {"build": "mooncake-non-cuda==0.3.13.post1",
                           "profile": PROFILES[profile].describe(WITH_OPLOG)},
            "requirements": {"MP-6": {"verdict": verdict, "tests": [test]},
                             "MP-10": {"verdict": "pass", "tests": [test]}}}


def test_difference_line_names_both_profiles_and_what_was_seen():
    lines = profile_differences({
        "reference": {"requirements": {"MP-6": {"verdict": "pass", "tests": []}}},
        "mooncake-non-cuda==0.3.13.post1": _column("ha-oplog", "pass"),
        "mooncake-non-cuda==0.3.13.post1@defaults": _column(
            "defaults", "FAIL", "AssertionError: 0 of 30 objects after failover: a standby\n"
                                "assert [] == ['k0']")})
    assert lines == [
        "MP-6 on mooncake-non-cuda==0.3.13.post1: pass with ha-oplog (--enable_oplog=true); "
        "FAIL with defaults (no --enable_oplog): 0 of 30 objects after failover: a standby"]


def test_no_line_where_the_profiles_agree_or_one_build_has_one_profile():
    assert profile_differences({"a": _column("ha-oplog", "pass"),
                                "b": _column("defaults", "pass")}) == []
    assert profile_differences({"a": _column("defaults", "FAIL", "x")}) == []


DEPENDS_ON_PROFILE = """
import pytest

@pytest.mark.mc_req("MP-6")
def test_index_after_failover(mc_target):
    assert mc_target.profile.name != "defaults", "0 of 40 objects after failover"

@pytest.mark.mc_req("MP-10")
def test_same_everywhere(mc_target):
    pass
"""


def test_matrix_columns_of_two_profiles_record_their_deployment(pytester: pytest.Pytester):
    empty = pytester.mkdir("no-build")
    pytester.makefile(".toml", cols=(f'[[column]]\ntarget = "mooncake:{empty}"\n'
                                     f'[[column]]\ntarget = "mooncake:{empty}@defaults"\n'))
    pytester.makepyfile(DEPENDS_ON_PROFILE)
    result = pytester.runpytest("--mc-matrix=cols.toml", "--mc-report=m.json", "-p",
                                "no:cacheprovider", "--junitxml=j.xml")
    result.assert_outcomes(passed=3, failed=1)
    build = f"mooncake:{empty}"
    result.stdout.fnmatch_lines([
        f"*{build}@defaults: *deployed: defaults (no --enable_oplog)*",
        "verdicts that depend on the deployment profile:",
        f"  MP-6 on {build}: pass with ha-oplog (*); FAIL with defaults (no --enable_oplog): "
        "0 of 40 objects after failover*",
    ])
    doc = json.loads((pytester.path / "m.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    profiles = {c: col["deployment"]["profile"]["name"] for c, col in doc["columns"].items()}
    assert profiles == {build: "ha-oplog", f"{build}@defaults": "defaults"}
    assert doc["columns"][build]["deployment"]["masters"]["flags"].startswith("not known: ")
    assert doc["profile_differences"][0].startswith(f"MP-6 on {build}: pass with ha-oplog")
    props = {p.get("name"): p.get("value") for p in
             ET.parse(pytester.path / "j.xml").getroot().iter("property")}
    assert props[f"mooncake_target_deployment[{build}@defaults]"].startswith(
        "defaults (no --enable_oplog); masters: not known: ")


def test_an_unknown_profile_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--mc-target=mooncake==0.3.13.post1@oplog-on")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown deployment profile 'oplog-on'; known profiles: "
                                 "defaults (*); ha-oplog (*); ha-snapshot (*"])


def test_the_master_configurations_tests_started_are_counted_per_column():
    seen = SeenDeployments()
    plain = json.dumps({"flags": ["--enable_ha=true"], "env": {}})
    snapshots = json.dumps({"flags": ["--enable_ha=true", "--enable_snapshot=true"],
                            "env": {"MOONCAKE_SNAPSHOT_LOCAL_PATH": "<cluster workdir>/s"}})
    for when in ("setup", "call", "teardown"):  # one test: counted once, at its call phase
        seen.record("b@defaults", when, [(SEEN_PROPERTY, plain), ("mc_req", "MP-6")])
    seen.record("b@defaults", "call", [(SEEN_PROPERTY, plain)])
    seen.record("b@defaults", "call", [(SEEN_PROPERTY, snapshots)])
    targets = {"b@defaults": {"deployment": {"masters": {"flags": ["--enable_ha=true"]}}},
               "reference": {"version": "x"}}
    seen.merge(targets)
    assert targets["b@defaults"]["deployment"]["masters"]["seen"] == [
        {"flags": ["--enable_ha=true"], "env": {}, "tests": 2},
        {"flags": ["--enable_ha=true", "--enable_snapshot=true"],
         "env": {"MOONCAKE_SNAPSHOT_LOCAL_PATH": "<cluster workdir>/s"}, "tests": 1}]
    assert "deployment" not in targets["reference"]
