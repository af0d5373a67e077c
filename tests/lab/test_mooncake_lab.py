"""A lab running a real Mooncake release (``lab up --mooncake 0.3.13.post1``): the suites,
through ``--mc-target=cluster:<its file>``, judge the release as the local mooncake target
judges the same release (the release run stored in fixtures/reports/release.json, column
"mooncake"). A difference would be ours (a flag, a host, a component the lab started wrongly),
never the build's. Skipped with the reason where this machine cannot build a lab or install
the release's environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_mooncake.lab.fixture import make_lab_fixture
from pytest_mooncake.schemas.cluster_manifest import load_manifest
from pytest_mooncake.targets import resolve_target
from pytest_mooncake.targets.base import Capability

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "0.3.13.post1"
LOCAL_RUN = ROOT / "fixtures" / "reports" / "release.json"
JUDGED = ["suites/metadata/test_replacement.py::test_peer_killed_and_restarted_recovers",
          "suites/compat/test_rolling_upgrade.py::"
          "test_rollout_order_keeps_a_mixed_cluster_transferring",
          "suites/metadata/test_identity.py::test_unknown_fields_are_accepted"]
"""MR-16 and MR-17 as a user of a short metadata cache sees them: both need B's cache bounded
(``prefer_ttl_ms`` / ``ttl_ms``) to follow a restarted peer, since 0.3.13 never refreshes a
descriptor on a failed transfer. MR-8's unknown fields: a forced lookup of a peer the engine
never opened is a plain fetch (the local target's reading), not n/a."""

mc_mooncake_lab = make_lab_fixture(flavour=RELEASE, prefix="m")
pytestmark = pytest.mark.xdist_group("mc_lab_mooncake")


def outcomes(report: dict, column: str | None = None) -> dict[str, str]:
    """Outcome by test (node id without its parameters) in a --mc-report file (of a matrix
    run: in ``column``; of one target: its own)."""
    columns = [report["columns"][column]] if column else [report]
    return {t["nodeid"].split("[")[0]: t["outcome"] for c in columns
            for r in c["requirements"].values() for t in r["tests"]}


def test_the_release_engines_take_a_cache_ttl_through_the_lab_file(mc_mooncake_lab):
    """The lab names the cache settings the release reads (probed in its ELF files) on every
    engine, so the cluster target can start a per-test engine with a test's TTL, as the local
    target does."""
    spec = load_manifest(mc_mooncake_lab.cluster_file)
    assert spec.engines and all(
        "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS" in e.cache_env for e in spec.engines), \
        [(e.segment, e.cache_env) for e in spec.engines]
    target = resolve_target(f"cluster:{mc_mooncake_lab.cluster_file}")
    try:
        assert "ttl_ms" in target.placement.engine_options
        assert target.missing(Capability.CACHE_TTL) is None
    finally:
        target.close()


def test_mr16_mr17_mr8_judge_the_release_as_the_local_target_does(mc_mooncake_lab, pytester,
                                                                   tmp_path):
    local = {nodeid: outcome for nodeid, outcome in
             outcomes(json.loads(LOCAL_RUN.read_text()), "mooncake").items()
             if nodeid in JUDGED}
    assert sorted(local) == sorted(JUDGED), f"{LOCAL_RUN} lacks a judged test: {local}"
    report = tmp_path / "lab.json"
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", *[f"{ROOT}/{t}" for t in JUDGED],
        f"--mc-target=cluster:{mc_mooncake_lab.cluster_file}", f"--mc-report={report}",
        "-p", "no:cacheprovider", timeout=600)
    out = result.stdout.str()
    assert f"(mooncake {RELEASE}); deployed: cluster-file" in out, "the lab's file does not name the release"
    on_lab = outcomes(json.loads(report.read_text()))
    assert on_lab == local, (
        f"on the {RELEASE} lab {on_lab}, on the local target {local}:\n"
        + "\n".join(line for line in out.splitlines() if "Error" in line or "FAIL" in line))
