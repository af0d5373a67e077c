"""CI's lab scenario: the conformance suites through ``--mc-target=cluster:FILE`` on a 3-node
reference lab (network namespaces, an sshd each, node control over SSH) judge MR-16 as the
local reference target does. Skipped with the probe's reason where this machine cannot build
a lab (not root, no ``ip netns``, no sshd)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MR16 = [f"{ROOT}/suites/metadata/test_replacement.py::test_peer_killed_and_restarted_recovers",
        f"{ROOT}/suites/metadata/test_chaos.py"]


def test_mr16_on_the_reference_lab_passes_through_the_cluster_target(mc_lab, pytester):
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", *MR16, f"--mc-target=cluster:{mc_lab.cluster_file}",
        "--mc-chaos-seconds=3", "-p", "no:cacheprovider", timeout=600)
    out = result.stdout.str()
    result.assert_outcomes(passed=2)
    assert f"target=cluster:{mc_lab.cluster_file} (cluster lab-{mc_lab.layout.name} " \
           f"(reference); deployed: cluster-file" in out
    assert "toxiproxy=http://198.18." in out, "the lab file's Toxiproxy was not used"
    row = next(line for line in out.splitlines() if line.startswith("MR-16"))
    assert "pass (2)" in row, row


SKEW_AND_LOG = [f"{ROOT}/suites/compat/test_mixed_engines.py",
                f"{ROOT}/suites/metadata/test_replacement.py::test_recovery_is_visible_in_the_log"]


def test_skew_roles_share_the_lab_etcd_and_engine_logs_are_read_on_the_nodes(mc_lab, pytester):
    """A skew role started beside the lab uses the lab's etcd (mixed-engines' pairs are n/a
    because the cluster target starts only the engines its file lists, never a failed
    'shares one etcd' precondition), and MR-15 reads B's log through its node as the local
    reference target reads it (pass, not an AttributeError)."""
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", *SKEW_AND_LOG, f"--mc-target=cluster:{mc_lab.cluster_file}",
        "-p", "no:cacheprovider", "-rs", timeout=600)
    out = result.stdout.str()
    result.assert_outcomes(passed=1, skipped=4)  # the mixed pairs on etcd and on P2P handshake
    assert "P2P" in out, out
    for role in ("w", "r"):
        assert f"cluster:{mc_lab.cluster_file} lists no engine 'mixed-{role}-" in out, out
    assert "shares one etcd" not in out, out
