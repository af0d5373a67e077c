"""The reference target's RDMA handle: the API the stale-completion fixtures use."""

import pytest

from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.reference import ReferenceTarget
from pytest_mooncake.targets.reference.rdma_handle import (
    RdmaExploration,
    RdmaRun,
    RdmaViolation,
    UncheckedCluster,
)


def _handle(profile, **kw):
    return ReferenceTarget(profile).rdma(seed=11, schedules=400, strategy="pct", **kw)


def _plain(value):
    """True when ``value`` holds only builtins and the Target API's dataclasses."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return type(value).__module__ in ("pytest_mooncake.targets.reference.rdma_handle",
                                      "pytest_mooncake.targets.base") and all(
        _plain(getattr(value, f)) for f in value.__dataclass_fields__)


def test_reference_target_declares_rdma_capabilities():
    target = ReferenceTarget("rfc")
    assert target.missing(Capability.RDMA_CONTROL) is None
    assert target.missing(Capability.SCHEDULER) is None
    with pytest.raises(TargetLacks, match="simulated verbs only"):
        target.rdma(verbs="pyverbs:mlx5_0")


def test_interleavings_by_name_through_the_handle():
    rfc, legacy = _handle("rfc"), _handle("legacy")
    assert len(rfc.scenarios()) == 6
    broken = 0
    for name in rfc.scenarios():
        good = rfc.run_interleaving(name, dedicated_poller=True)
        bad = legacy.run_interleaving(name)
        assert isinstance(good, RdmaRun) and _plain(good)
        assert good.ok, good.violations
        assert all(isinstance(v, RdmaViolation) for v in bad.violations)
        broken += not bad.ok
    assert broken >= 4


def test_explore_reports_a_replayable_token_and_replay_option_reruns_it():
    legacy = _handle("legacy")
    result = legacy.explore("stale_completion_after_retry")
    assert isinstance(result, RdmaExploration) and result.found and _plain(result)
    again = legacy.replay(result.token)
    assert again.violations == result.failure.violations
    rerun = _handle("legacy", replay=result.token).explore("ignored-when-replaying")
    assert rerun.schedules_run == 1 and rerun.failure.violations == result.failure.violations
    assert not _handle("rfc").explore("qp_fatal_races_completion", schedules=50).found
    with pytest.raises(ValueError, match="replay token"):
        legacy.replay("mcs1.garbage!")


@pytest.mark.parametrize("profile,clean", [("rfc", True), ("legacy", False)])
def test_hand_built_stale_completion(profile, clean):
    handle = _handle(profile)
    c = handle.cluster(checked=True)
    c.add_node("A")
    c.add_node("B", ["mlx5_0", "mlx5_1"])
    c.write_local("A", 0, b"payload!" * 512)
    t = c.submit("A", "B", 4096)
    c.hold(t, 0, tag="old")
    assert c.settle()
    assert c.slices(t)[0]["status"] == "POSTED"
    c.force_retry(t, 0)
    assert c.settle()
    assert c.status(t) == "COMPLETED"
    assert c.release("old") == 1
    assert c.settle()
    assert c.read("B", 0, 4096) == b"payload!" * 512
    violations = c.check()
    assert _plain(violations) and _plain(c.slices(t)) and _plain(c.counters("A"))
    assert (violations == []) is clean, violations
    if clean:
        assert c.counters("A")["stale_completions"] == 1
    handle.close()


def test_hand_built_faults_and_peer_restart_on_rfc():
    c = _handle("rfc").cluster(checked=True)
    c.add_node("A")
    c.add_node("B", ["mlx5_0", "mlx5_1"])
    t1 = c.submit("A", "B", 4 * 4096)
    c.fail_post(t1, 2)
    c.inject_error(t1, 0, "RETRY_EXC_ERR")
    assert c.settle() and c.status(t1) == "COMPLETED"
    assert c.qp_fatal("A", "B") >= 1
    c.gid_change("A", "mlx5_0", "fe80::99")
    assert c.settle()
    t2 = c.submit("A", "B", 4096)
    assert c.settle() and c.status(t2) == "COMPLETED"
    c.restart_peer("B")
    assert c.refresh("A", "B")
    assert c.counters("A")["replacements"] == 1
    assert any(r["cause"] == "replacement" for r in c.retired("A"))
    t3 = c.submit("A", "B", 4096, dst_offset=8192)
    assert c.settle() and c.status(t3) == "COMPLETED"
    assert c.check() == []
    assert all(_plain(e) for e in c.endpoints("A"))
    with pytest.raises(ValueError, match="unknown completion status"):
        c.inject_error(t3, 0, "NOPE")


def test_free_running_cluster_through_the_handle():
    handle = _handle("rfc")
    c = handle.cluster(controlled=False, checked=True)
    c.add_node("A", ["n0", "n1"])
    c.add_node("B", ["n0", "n1"])
    ts = [c.submit("A", "B", 16 * 4096, src_offset=i * 65536, dst_offset=i * 65536)
          for i in range(4)]
    assert c.settle(timeout=30)
    assert all(c.status(t) == "COMPLETED" for t in ts)
    handle.close()
    assert c.check() == []


def test_cqs_name_each_cq_with_its_entries_and_nothing_lost():
    handle = _handle("rfc")
    c = handle.cluster(controlled=False, max_cqe=8)
    c.add_node("A", ["mlx5_0", "mlx5_1"])
    c.add_node("B")
    t = c.submit("A", "B", 4 * 4096)
    assert c.settle() and c.status(t) == "COMPLETED"
    # the simulated CQ keeps every completion: the engine's CQ budget keeps it within its entries
    assert c.cqs("A") == [
        {"cq": f"{nic}/cq0", "nic": nic, "capacity": 8, "queued": 0, "completions": None,
         "lost": 0} for nic in ("mlx5_0", "mlx5_1")]
    assert _plain(c.cqs("B"))
    handle.close()


@pytest.mark.parametrize("poller", [False, True, "0"], ids=["default", "dedicated", "said-no"])
def test_cq_pollers_name_the_threads_that_polled_each_cq(poller):
    handle = _handle("rfc")
    c = handle.cluster(controlled=False, dedicated_poller=poller)
    c.add_node("A")
    c.add_node("B")
    t = c.submit("A", "B", 4 * 4096)
    assert c.settle() and c.status(t) == "COMPLETED"
    # shared: worker 0 polls the context's one CQ; dedicated: worker 0 is the poller
    assert c.cq_pollers("A") == {"mlx5_0/cq0": ["A@mlx5_0.w0"]}
    assert c.worker_model("A") == ("dedicated" if poller is True else "shared")
    with pytest.raises(TargetLacks, match="one thread"):
        handle.cluster().cq_pollers("A")
    handle.close()


def test_mc_completions_fixture_gives_this_handle(mc_completions):
    assert mc_completions.scenarios()
    assert mc_completions.run_interleaving("partial_post_bad_wr").steps > 0


@pytest.mark.parametrize("profile", ["rfc", "legacy"])
def test_worker_model_and_per_post_wr_ids_are_observable(profile):
    handle = _handle(profile)
    c = handle.cluster()
    c.add_node("A")
    c.add_node("B", ["mlx5_0", "mlx5_1"])
    assert c.worker_model("A") == ("shared" if profile == "rfc" else "dedicated")
    assert handle.cluster(dedicated_poller=True).add_node("X") == "X"
    t = c.submit("A", "B", 4096)
    c.inject_error(t, 0, "REM_ACCESS_ERR")
    assert c.settle() and c.status(t) == "COMPLETED"
    posts = c.posts(t, 0)
    assert len(posts) == 2 and _plain(posts)
    distinct = posts[0]["wr_id"] != posts[1]["wr_id"]
    assert distinct is (profile == "rfc"), posts


@pytest.mark.parametrize("controlled", [True, False], ids=["controlled", "free"])
def test_a_cluster_runs_its_engines_unobserved_unless_checked(controlled):
    """By default the engines run as deployed, with no observer: a transfer whose first attempt
    fails (an error completion, the endpoint retired, a retry, a success) still completes, the
    NICs' posts are still reported, and check() refuses rather than judge a run the checker
    never saw. ``checked=True`` attaches the checker, and check() judges."""
    handle = _handle("rfc")
    for checked in (False, True):
        c = handle.cluster(controlled=controlled, checked=checked)
        c.add_node("A")
        c.add_node("B")
        transports = [p.transport for p in c.sim.peers.values()]
        assert all((tr.observer is c.checker) is checked for tr in transports)
        assert all((tr.observer is None) is (not checked) for tr in transports)
        t = c.submit("A", "B", 4096)
        c.inject_error(t, 0, "REM_ACCESS_ERR")
        assert c.settle() and c.status(t) == "COMPLETED"
        assert len(c.posts(t, 0)) == 2
        assert any(r["peer_nic_path"].startswith("B@") for r in c.retired("A"))
        c.restart_peer("B")
        assert c.sim.peers["B"].transport.observer is (c.checker if checked else None)
        t2 = c.submit("A", "B", 4096)
        assert c.settle() and c.status(t2) == "COMPLETED" and len(c.posts(t2, 0)) >= 1
        if checked:
            assert c.check() == []
        else:
            with pytest.raises(UncheckedCluster, match="checked=True"):
                c.check()
    handle.close()
