"""Version skew (MP-8): rfc rejects incompatible clients at the handshake and logs the peer's
version; legacy lets them attach and read, fails only their writes, and logs nothing."""

from __future__ import annotations

import pytest

from pytest_mooncake.waits import TRANSIENT, wait_until


@pytest.mark.mc_req("MP-8")
def test_incompatible_client_is_rejected_and_the_master_logs_its_version(cluster_factory):
    cluster = cluster_factory("rfc", masters=1)
    bad = cluster.start_client("old-client", version="9.0.0", wait_attached=False)
    status = wait_until(lambda: (lambda s: s if "INVALID_VERSION" in (s["last_error"] or "") else None)(
        bad.status()), 10, "rejection reaches the client", ignore=TRANSIENT)
    assert not status["attached"]
    assert "9.0.0" in status["last_error"]
    log = cluster.master_log(0)
    assert "rejected client 'old-client'" in log and "'9.0.0'" in log
    assert cluster.metrics(0)["master_rejected_client_versions_total"] >= 1
    put = bad.put("k")
    get = bad.exists("k")
    assert put["ok"] is False and get["ok"] is False
    # the refusal is the answer (not "no leader attached" after the reattach timeout)
    for answer in (put, get):
        assert "refused this client" in answer["message"] and "9.0.0" in answer["message"], answer


@pytest.mark.mc_req("MP-8")
def test_compatible_skew_is_accepted_for_reads_and_writes(cluster_factory):
    cluster = cluster_factory("rfc", masters=1)
    newer = cluster.start_client("newer-client", version="1.9.0")
    assert newer.put("k")["ok"]
    assert newer.exists("k")["result"]["exists"] is True


def test_legacy_skewed_client_reads_fine_writes_fail_and_the_master_is_silent(cluster_factory):
    cluster = cluster_factory("legacy", masters=1, warmup=0)
    same = cluster.start_client("same-client")
    assert same.put("k")["ok"]
    skewed = cluster.start_client("skewed-client", version="1.2.0")
    assert skewed.exists("k")["result"]["exists"] is True
    put = skewed.put("k2")
    assert put["ok"] is False and put["error"] == "INVALID_RPC_ARGUMENTS"
    assert "1.2.0" not in cluster.master_log(0)
