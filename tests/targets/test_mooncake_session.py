"""A whole pytest session with ``--mc-target=mooncake``: real verdicts and n/a reasons."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets import resolve_target

SUITE = '''
import pytest

@pytest.mark.mc_requires("engine")
def test_write_then_read(mc_engine):
    a, b = mc_engine("sess-a"), mc_engine("sess-b")
    assert a.write(b.segment, 0, b"real").ok
    assert b.local_read(0, 4) == b"real"

@pytest.mark.mc_requires("forced_refresh")
def test_needs_forced_refresh(mc_engine):
    mc_engine("never")

def test_counters_without_marker(mc_engine):
    mc_engine("sess-c").stats()

@pytest.mark.mc_requires("master_cluster")
def test_store_through_ha_pair(mc_master_cluster):
    cluster = mc_master_cluster(masters=2, clients=1)
    cluster.leader(timeout=30)
    assert cluster.client().put("session-key", 32)["ok"]
    assert cluster.client().get("session-key")["ok"]

@pytest.mark.mc_requires("master_snapshot")
def test_needs_snapshots(mc_master_cluster):
    cluster = mc_master_cluster(snapshots=True)
    assert cluster.snapshot(cluster.standbys()[0])["objects"] == 0

def test_failing_observation(mc_engine):
    a = mc_engine("sess-d")
    assert a.write("no-such-peer", 0, b"x").ok, "write to an absent peer"
'''


def test_session_against_the_real_wheel_gives_verdicts_and_reasons(pytester: pytest.Pytester):
    if resolve_target("mooncake").missing("engine"):
        pytest.skip("n/a: " + resolve_target("mooncake").missing("engine"))
    pytester.makepyfile(test_tiny=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", "--mc-target=mooncake", "-rs", timeout=240)
    result.assert_outcomes(passed=3, skipped=2, failed=1)
    out = result.stdout.str()
    assert "target=mooncake (mooncake-transfer-engine" in out
    assert "n/a: mooncake.engine of mooncake-transfer-engine" in out
    assert "offers no forced refresh of one peer" in out
    assert "exposes no counters" in out
    assert "get_first_buffer_address('no-such-peer') returned" in out
    assert "engine sess-d log" in out or "sess-d" in out


def test_session_with_unusable_spec_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_tiny="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", "--mc-target=mooncake:/nonexistent/dir/", timeout=60)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not a directory" in result.stderr.str()
