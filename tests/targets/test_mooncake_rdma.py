"""The mooncake target's RDMA handle (targets/mooncake/emulated_rdma.py) drives a real build.

Real 0.3.13 engine processes on emulated RDMA devices: a completion held through the verbs
control socket keeps the build's transfer waiting until it is released; a released error status
is what the build sees (it posts the slice again); holds under two tags are released in the
order the test picks; a process killed while completions are held leaves nothing held and is
reported as a crash; ``--mc-verbs`` picks the layer. Without the wheel these are n/a. 0.3.14
(which links libmlx5) and 0.3.10 (built with _FORTIFY_SOURCE) move bytes both ways as RDMA work
requests on the same layer where their environments are cached.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from pytest_mooncake.releases import find_env
from pytest_mooncake.report.failure_vocabulary import symptom_of
from pytest_mooncake.targets import TargetContext, resolve_target
from pytest_mooncake.targets.base import Capability, NotQuiescent, TargetLacks
from pytest_mooncake.targets.mooncake.verbs_layers import (
    EmulatedVerbs,
    HostVerbs,
    SimulatorVerbs,
    verbs_layer,
)
from pytest_mooncake.verbs.library import mlx5_path
from pytest_mooncake.waits import wait_until

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_mooncake_rdma")

SLICE = 4096


def data(tag: bytes, length: int) -> bytes:
    return (tag * (length // len(tag) + 1))[:length]


# ------------------------------------------------------------------ the layer (no processes)


def test_auto_is_emulated_without_rdma_devices_and_host_with_them(tmp_path):
    assert isinstance(verbs_layer("auto", host_devices=False), EmulatedVerbs)
    assert isinstance(verbs_layer("auto", host_devices=True), HostVerbs)
    assert isinstance(verbs_layer("", host_devices=False), EmulatedVerbs)
    named = verbs_layer("emulated:mlx5_7,mlx5_9")
    assert named.mode == "emulated:mlx5_7,mlx5_9"
    assert named.control_lacks("build 1.0") is None


def test_layers_without_control_say_why():
    host = HostVerbs().control_lacks("build 1.0")
    assert "build 1.0" in host and "interposer" in host.lower()
    sim = SimulatorVerbs("sim").control_lacks("build 1.0")
    assert "--mc-verbs=emulated" in sim
    with pytest.raises(RuntimeError, match="--mc-verbs=host"):
        HostVerbs().fabric(1)


# ------------------------------------------------------------------ a real build


@pytest.fixture(scope="module")
def rdma(mooncake_target):
    mooncake_target.use_verbs("emulated:mlx5_0,mlx5_1")
    reason = mooncake_target.missing("rdma_control")
    if reason:
        pytest.skip(f"n/a: {reason}")
    handle = mooncake_target.rdma(seed=7)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture(scope="module")
def pair(rdma):
    """A and B on one fabric (A one NIC, B two), kept for the module: engines take a second."""
    cluster = rdma.cluster()
    cluster.add_node("A", ["mlx5_0"])
    cluster.add_node("B", ["mlx5_0", "mlx5_1"])
    return cluster


def test_a_held_completion_keeps_the_transfer_waiting_until_released(pair):
    payload = data(b"held-by-test", SLICE)
    pair.write_local("A", 0, payload)
    t = pair.submit("A", "B", SLICE)
    pair.hold(t, 0, tag="first")
    assert pair.settle(), "the cluster did not settle with one completion held"
    held = pair.held("first")
    assert len(held) == 1 and held[0]["node"] == "A" and held[0]["nic"] == "mlx5_0", held
    assert pair.status(t) == "WAITING", "the build ended a transfer whose completion is held"
    assert pair.read("B", 0, SLICE) == payload, "stage=completion: the bytes land, held or not"
    assert pair.release("first") == 1
    assert pair.settle() and pair.status(t) == "COMPLETED"
    assert not pair.held("first") and not pair.check()


def test_cqs_are_what_the_nics_counted(pair):
    t = pair.submit("A", "B", SLICE, src_offset=3 * SLICE, dst_offset=3 * SLICE)
    assert pair.settle() and pair.status(t) == "COMPLETED"
    cqs = pair.cqs("A")
    assert cqs and all(cq["nic"] == "mlx5_0" and cq["cq"].startswith("mlx5_0/cq") for cq in cqs)
    assert all(cq["capacity"] == 4096 and cq["queued"] == 0 and cq["lost"] == 0 for cq in cqs), cqs
    assert sum(cq["completions"] for cq in cqs) >= 1, cqs


def test_a_released_error_status_is_what_the_build_sees(pair):
    t = pair.submit("A", "B", SLICE, src_offset=SLICE, dst_offset=SLICE)
    pair.hold(t, 0, tag="to-fail")
    assert pair.settle()
    first = pair.posts(t, 0)
    assert len(first) == 1, f"one attempt posted before the release: {first}"
    pair.release("to-fail", status="RETRY_EXC_ERR")
    assert pair.settle()
    posts = pair.posts(t, 0)
    # 0.3.13 retries a slice whose completion failed; the retry is a post of its own
    assert len(posts) >= 2, (f"the build did not act on the error completion the test "
                             f"released: {posts}, transfer {pair.status(t)}")
    assert pair.status(t) == "COMPLETED"
    assert not pair.check()


def test_completions_are_released_in_the_order_the_test_picks(pair):
    """Slice 1's completion is held under 'early', slice 0's under 'late'; releasing 'early'
    alone leaves the transfer waiting on slice 0; then 'late' ends it."""
    payload = data(b"reordered", 2 * SLICE)
    pair.write_local("A", 4 * SLICE, payload)
    t = pair.submit("A", "B", 2 * SLICE, src_offset=4 * SLICE, dst_offset=4 * SLICE)
    pair.hold(t, 0, tag="late")
    pair.hold(t, 1, tag="early")
    assert pair.settle()
    assert len(pair.held("late")) == 1 and len(pair.held("early")) == 1
    assert pair.release("early") == 1
    assert pair.settle()
    assert pair.status(t) == "WAITING", "slice 0's completion is still held"
    assert pair.release("late") == 1
    assert pair.settle() and pair.status(t) == "COMPLETED"
    assert pair.read("B", 4 * SLICE, 2 * SLICE) == payload


def test_a_wait_that_ends_before_the_build_rests_says_what_the_build_left_undone(pair):
    """settle() at its deadline raises NotQuiescent naming the transfer the build had not
    ended and that its NICs never went quiet, never a bare False; the message speaks of the
    build (no harness symptom in report/failure_vocabulary.py)."""
    t = pair.submit("A", "B", SLICE, src_offset=6 * SLICE, dst_offset=6 * SLICE)
    pair.hold(t, 0, tag="undone")
    with pytest.raises(NotQuiescent) as info:
        pair.settle(timeout=0.3)  # shorter than the quiet period a held WR needs
    message = str(info.value)
    assert f"transfer {t} (write {SLICE} bytes A->B) had not ended" in message, message
    assert "never stayed unchanged" in message, message
    assert symptom_of(f"NotQuiescent: {message}") is None, message
    assert pair.release("undone") == 1
    assert pair.settle() and pair.status(t) == "COMPLETED"


def test_qp_fatal_returns_once_the_build_acknowledged_every_event(pair):
    """QP_FATAL goes to each of A's QPs to B one at a time, the next after the build acked the
    previous: when qp_fatal() returns, every event it raised is acknowledged (raised together,
    they raced the build's event thread)."""
    t = pair.submit("A", "B", SLICE, src_offset=7 * SLICE, dst_offset=7 * SLICE)
    assert pair.settle() and pair.status(t) == "COMPLETED"
    before = pair.counters("A")
    n = pair.qp_fatal("A", "B")
    after = pair.counters("A")
    assert n >= 1, f"precondition: A has live QPs to B ({pair.qps('A')})"
    assert after["events"] - before["events"] == n, (before, after)
    assert after["acked"] == after["events"], (
        f"qp_fatal() returned with {after['events'] - after['acked']} of A's events unacked")
    pair.settle()


def test_unknown_settings_are_refused_naming_what_the_build_takes(rdma):
    with pytest.raises(TargetLacks, match="slice_size") as info:
        rdma.cluster(no_such_knob=1)
    assert info.value.capability == Capability.RDMA_CONTROL


def test_checked_is_accepted_and_changes_nothing(rdma):
    """``cluster(checked=True)`` asks the reference to attach its invariant checker; a real
    build's check() reads its NICs from outside either way, so the keyword is no setting of
    the build (never refused as one) and is passed to no engine."""
    cluster, plain = rdma.cluster(checked=True), rdma.cluster()
    try:
        assert cluster.knobs == plain.knobs
    finally:
        cluster.close()
        plain.close()


def test_a_build_without_the_dedicated_poller_knob_says_so(rdma):
    """No release to 0.3.14 names MC_RDMA_DEDICATED_POLLER; setting it changed nothing, and
    CO-1 then passed or failed on which worker's shard the one test slice landed in."""
    with pytest.raises(TargetLacks, match="does not read MC_RDMA_DEDICATED_POLLER") as info:
        rdma.cluster(dedicated_poller=True)
    assert "no dedicated-poller opt-in" in info.value.reason


def test_closing_a_cluster_stops_every_engine_through_its_destructor(rdma):
    """``close`` asks every node to stop before it waits for any: each engine still exits by
    itself (its destructor ran, not SIGTERM), and none leaves its keys in the metadata store;
    a node already dead is reaped without a stop command."""
    cluster = rdma.cluster()
    try:
        for name in ("A", "B", "C"):
            cluster.add_node(name)
        t = cluster.submit("A", "B", SLICE)
        assert cluster.settle() and cluster.status(t) == "COMPLETED"
        engines = {name: n.engine for name, n in cluster.nodes.items()}
        os.kill(cluster.nodes["C"].pid, signal.SIGKILL)
        wait_until(lambda: not cluster.alive("C"), 30, "C to die of SIGKILL")
    finally:
        cluster.close()
    assert {n: e.stop_outcome for n, e in engines.items()} == {
        "A": "exited", "B": "exited", "C": "not running"}
    assert [e.left_behind for n, e in engines.items() if n != "C"] == [[], []]
    assert not any(e.alive() for e in engines.values())


def test_nodes_started_side_by_side_are_the_clusters_in_the_order_named(rdma):
    """``add_nodes`` starts the engines at once; each is a node as ``add_node`` makes it (its
    own process, its own NIC control), listed in the order named, and moves bytes."""
    cluster = rdma.cluster()
    try:
        cluster.add_node("A")
        assert cluster.add_nodes(["P2", "P0", "P1"]) == ["P2", "P0", "P1"]
        assert list(cluster.nodes) == ["A", "P2", "P0", "P1"]
        pids = {n.pid for n in cluster.nodes.values()}
        assert len(pids) == 4 and all(cluster.alive(n) for n in cluster.nodes)
        transfers = {}
        for i, peer in enumerate(("P2", "P0", "P1")):
            cluster.write_local("A", i * SLICE, data(peer.encode(), SLICE))
            transfers[peer] = cluster.submit("A", peer, SLICE, src_offset=i * SLICE)
        assert cluster.settle()
        assert {p: cluster.status(t) for p, t in transfers.items()} == dict.fromkeys(
            transfers, "COMPLETED")
        assert all(cluster.read(p, 0, SLICE) == data(p.encode(), SLICE) for p in transfers)
        assert not cluster.check()
    finally:
        cluster.close()


def test_nodes_named_twice_or_on_unknown_nics_are_refused_before_any_starts(rdma):
    cluster = rdma.cluster()
    try:
        cluster.add_node("A")
        with pytest.raises(ValueError, match=r"node name\(s\) A, P0 given twice or already"):
            cluster.add_nodes(["P0", "A", "P0"])
        with pytest.raises(ValueError, match=r"NIC\(s\) mlx5_9 are not on this fabric"):
            cluster.add_nodes(["P0", "P1"], ["mlx5_9"])
        assert list(cluster.nodes) == ["A"]
    finally:
        cluster.close()


def test_a_node_that_fails_to_start_leaves_the_others_to_the_cluster(rdma, monkeypatch):
    """One engine of several fails to start: the error is raised, and the ones that started
    are the cluster's, so its close stops them (none is left running)."""
    cluster = rdma.cluster()
    start = cluster._start_node

    def start_but_p1(name, nics, buffer_len):
        if name == "P1":
            raise RuntimeError("P1 did not start (planted by the test)")
        return start(name, nics, buffer_len)

    monkeypatch.setattr(cluster, "_start_node", start_but_p1)
    try:
        with pytest.raises(RuntimeError, match="P1 did not start"):
            cluster.add_nodes(["P0", "P1", "P2"])
        assert list(cluster.nodes) == ["P0", "P2"]
        engines = [n.engine for n in cluster.nodes.values()]
        assert all(e.alive() for e in engines)
    finally:
        cluster.close()
    assert not any(e.alive() for e in engines)


def test_a_killed_process_leaves_nothing_held_and_is_reported(rdma):
    cluster = rdma.cluster()
    try:
        cluster.add_node("A")
        cluster.add_node("B")
        t = cluster.submit("A", "B", SLICE)
        cluster.hold(t, 0, tag="dies")
        assert cluster.settle()
        assert cluster.held("dies")
        pid = cluster.nodes["A"].pid
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not cluster.alive("A"), 30, "A to die of SIGKILL")
        assert cluster.held("dies") == [], "held state outlived the process that held it"
        assert cluster.release("dies") == 0
        found = {v.kind: v.detail for v in cluster.check()}
        assert "killed by SIGKILL" in found.get("actor_crashed", ""), found
        # settle() depends on A to end A's transfer: with A dead it stops at once, naming A
        with pytest.raises(NotQuiescent, match=rf"transfer {t} .* never can: its initiator A "
                                               rf"\(pid {pid}\) died: killed by SIGKILL"):
            cluster.settle(timeout=600)
        run_dir = Path(cluster.fabric.run_dir)
    finally:
        cluster.close()
    assert not run_dir.exists(), f"the fabric's run directory {run_dir} outlived its cluster"


# ------------------------------------------------------------------ releases from the cache

NEWEST = "mooncake-cuda13==0.3.14"
FORTIFIED = "mooncake-non-cuda==0.3.10.post2"


def release_rdma(spec: str, etcd, workdir: Path, seed: int):
    """``spec``'s target on emulated devices, from the user's release cache (never installed
    here: `python -m pytest_mooncake.releases install SPEC` does that); yields its RDMA handle."""
    if find_env(spec) is None:
        pytest.skip(f"n/a: {spec} is not installed in the release cache; install it with "
                    f"`python -m pytest_mooncake.releases install {spec}`")
    target = resolve_target(spec)
    target.open(TargetContext(seed=1, workdir=workdir,
                              etcd_endpoints=lambda: list(etcd.endpoints)))
    try:
        target.use_verbs("emulated:mlx5_0,mlx5_1")
        reason = target.missing("rdma_control")
        assert reason is None, f"{spec} on emulated devices: {reason}"
        handle = target.rdma(seed=seed)
        try:
            yield handle
        finally:
            handle.close()
    finally:
        target.close()


@pytest.fixture(scope="module")
def newest_rdma(mc_etcd, tmp_path_factory):
    yield from release_rdma(NEWEST, mc_etcd, tmp_path_factory.mktemp("mc-0314"), 14)


@pytest.fixture(scope="module")
def fortified_rdma(mc_etcd, tmp_path_factory):
    yield from release_rdma(FORTIFIED, mc_etcd, tmp_path_factory.mktemp("mc-0310"), 10)


def round_trip_over_rdma(cluster) -> None:
    """A writes to B and reads it back; both transfers were RDMA work requests on the NICs."""
    payload = os.urandom(3 * SLICE + 123)
    cluster.write_local("A", 0, payload)
    out = cluster.submit("A", "B", len(payload), dst_offset=SLICE)
    assert cluster.settle() and cluster.status(out) == "COMPLETED"
    assert cluster.read("B", SLICE, len(payload)) == payload
    back = cluster.submit("A", "B", len(payload), src_offset=8 * SLICE, dst_offset=SLICE,
                          op="read")
    assert cluster.settle() and cluster.status(back) == "COMPLETED"
    assert cluster.read("A", 8 * SLICE, len(payload)) == payload
    assert cluster.posts(out, 0) and cluster.posts(back, 0), \
        "the bytes moved, but not as RDMA work requests on the emulated NIC"
    assert not cluster.check()


def test_a_release_linking_libmlx5_moves_bytes_over_emulated_rdma(newest_rdma):
    """0.3.14 links libmlx5 (DevX for its GPU device transport): its engine starts only with the
    emulator's libmlx5 stub, and its RDMA transport then runs on plain verbs."""
    cluster = newest_rdma.cluster()
    try:
        cluster.add_node("A", ["mlx5_0"])
        cluster.add_node("B", ["mlx5_1"])
        maps = Path(f"/proc/{cluster.nodes['A'].pid}/maps").read_text()
        assert str(mlx5_path().resolve()) in maps, "the engine did not load the libmlx5 stub"
        round_trip_over_rdma(cluster)
    finally:
        cluster.close()


def test_a_fortified_release_finds_its_hcas_and_posts_on_emulated_nics(fortified_rdma):
    """0.3.10 and 0.3.11 are built with _FORTIFY_SOURCE: they resolve each device's PCI function
    with __realpath_chk. Unanswered, topology discovery found 0 HCAs and the engine moved the
    bytes over TCP, so every RDMA suite read "nothing posted" as a finding of the build."""
    cluster = fortified_rdma.cluster()
    try:
        cluster.add_node("A", ["mlx5_0"])
        cluster.add_node("B", ["mlx5_0", "mlx5_1"])
        round_trip_over_rdma(cluster)
    finally:
        cluster.close()


def wedged_at_shutdown(handle) -> dict[str, str]:
    """A and B with 4-entry CQs after a 16-slice transfer, closed: each engine's stop outcome."""
    cluster = handle.cluster(max_cqe=4)
    try:
        cluster.add_node("A", ["mlx5_0"])
        cluster.add_node("B", ["mlx5_0"])
        t = cluster.submit("A", "B", 16 * SLICE)
        assert cluster.settle() and cluster.status(t) == "COMPLETED"
        engines = {name: n.engine for name, n in cluster.nodes.items()}
    finally:
        cluster.close()
    assert not any(e.alive() for e in engines.values())
    return {n: e.stop_outcome for n, e in engines.items()}


def test_a_shutdown_wedged_in_a_destroy_is_killed_and_says_why(newest_rdma):
    """0.3.14 stops its event thread before it destroys its CQs; a 4-entry CQ overran when its
    QPs' receives flushed, and rdma-core's ``ibv_destroy_cq`` waits for that CQ_ERR to be
    acknowledged for ever. ``close`` kills an engine once its shutdown waited
    ``SHUTDOWN_WEDGE`` s so, saying so, instead of waiting out the 30 s stop grace (every CO-3
    full-CQ test did, on both nodes: 60 s each)."""
    outcomes = wedged_at_shutdown(newest_rdma)
    wedged = [o for o in outcomes.values() if o.startswith("wedged at shutdown (thread ")]
    assert wedged, outcomes
    assert all(re.search(r"in ibv_destroy_cq of a CQ for \d+ async event\(s\)", o)
               and o.endswith("; killed") for o in wedged), wedged
    assert set(outcomes.values()) <= {"exited", *wedged}, outcomes
