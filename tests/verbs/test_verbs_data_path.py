"""The emulated verbs library's data path: devices, sysfs, RC semantics between processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from verbs_peers import (
    ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_READ,
    PORT_ACTIVE,
    QPS_ERR,
    QPS_INIT,
    QPS_RESET,
    QPS_RTR,
    QPS_RTS,
    READ,
    WC_LOC_PROT_ERR,
    WC_RDMA_READ,
    WC_RDMA_WRITE,
    WC_REM_ACCESS_ERR,
    WC_RETRY_EXC_ERR,
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    WRITE,
    Endpoint,
    connected_pair,
)

from pytest_mooncake.verbs import library_path

IBV_QP_STATE = 1


def test_devices_ports_and_gids_are_the_configured_ones(peers):
    p = peers()
    assert p.devices() == ["mlx5_0", "mlx5_1"]
    ctx = p.open("mlx5_1")
    port = p.query_port(ctx)
    assert port == {"rc": 0, "state": PORT_ACTIVE, "gid_tbl_len": 4, "link_layer": 2}
    assert p.query_device(ctx)["phys_port_cnt"] == 1
    # index 3: the IPv4-mapped RoCE v2 GID Mooncake's auto-selection prefers
    assert p.gid_ex(ctx, 3) == {"rc": 0, "gid": "00000000000000000000ffff7f000201", "type": 2}
    assert p.gid_ex(ctx, 0)["type"] == 1  # link-local, RoCE v1
    assert p.gid_ex(ctx, 9)["rc"] != 0  # past the table


def lines_printed(fabric, script: str) -> list[str]:
    """The lines a Python ``script`` prints when run under ``fabric``'s environment."""
    return subprocess.run([sys.executable, "-c", script], env=fabric.apply(), capture_output=True,
                          text=True, timeout=60, check=True).stdout.split("\n")


def test_sysfs_facts_reach_the_process_without_a_driver(fabric, peers):
    """What Mooncake reads: the uverbs node (a character device), realpath of the device's
    ../.. (the PCI function), its numa_node, and the GID's network device."""
    p = peers()
    p.open("mlx5_0")  # the process is a verbs user like any other
    script = (
        "import ctypes, os, stat\n"
        "libc = ctypes.CDLL(None); libc.realpath.restype = ctypes.c_char_p\n"
        "pci = libc.realpath(b'/sys/class/infiniband/mlx5_1/../..', None).decode()\n"
        "print(os.path.basename(pci))\n"
        "print(open(pci + '/numa_node').read().strip())\n"
        "print(open('/sys/class/infiniband/mlx5_1/device/numa_node').read().strip())\n"
        "print(open('/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3').read().strip())\n"
        "st = os.stat('/dev/infiniband/uverbs1')\n"
        "print(stat.S_ISCHR(st.st_mode), os.access('/dev/infiniband/uverbs1', os.R_OK | os.W_OK))\n"
    )
    out = lines_printed(fabric, script)
    assert out[:5] == ["0000:19:00.0", "1", "1", "lo", "True True"]
    if not os.path.exists("/sys/class/infiniband"):  # no RDMA driver here (the usual case):
        # outside the fabric's environment the host's sysfs is what one sees
        assert not os.path.exists("/sys/class/infiniband/mlx5_1/device/numa_node")


def test_fortified_path_calls_reach_the_device_tree(fabric):
    """Builds compiled with _FORTIFY_SOURCE (the 0.3.10 and 0.3.11 wheels) call __realpath_chk,
    __open_2 and __readlink_chk in place of realpath, open and readlink; answered by libc alone
    they found no PCI function, and the build ran with no HCA (TCP in place of RDMA)."""
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "chk = libc['__realpath_chk']; chk.restype = ctypes.c_char_p\n"
        "buf = ctypes.create_string_buffer(4096)\n"
        "pci = chk(b'/sys/class/infiniband/mlx5_1/../..', buf, len(buf))\n"
        "print(os.path.basename(pci.decode()) if pci else 'errno %d' % ctypes.get_errno())\n"
        "fd = libc['__open_2'](b'/sys/class/infiniband/mlx5_1/device/numa_node', os.O_RDONLY)\n"
        "print(os.read(fd, 16).decode().strip() if fd >= 0 else 'errno %d' % ctypes.get_errno())\n"
        "n = libc['__readlink_chk'](b'/dev/infiniband/uverbs1', buf, 4095, len(buf))\n"
        "print(buf.raw[:n].decode() if n >= 0 else 'errno %d' % ctypes.get_errno())\n"
    )
    out = lines_printed(fabric, script)
    assert out[:3] == ["0000:19:00.0", "1", "/dev/null"]


def test_write_and_read_move_bytes_between_two_processes(peers):
    a, b = connected_pair(peers(), peers())
    data = os.urandom(64 << 10)
    a.peer.fill(a.addr, data.hex())
    assert a.post(WRITE, b, 1, len(data), remote_offset=4096) == {"rc": 0, "bad_wr": None}
    (wc,) = a.poll_until(1)
    assert (wc["wr_id"], wc["status"], wc["opcode"], wc["len"]) == (1, WC_SUCCESS, WC_RDMA_WRITE,
                                                                     len(data))
    assert wc["qpn"] == a.qpn
    assert bytes.fromhex(b.peer.read(b.addr + 4096, len(data))) == data
    assert bytes.fromhex(b.peer.read(b.addr, 16)) == bytes(16)  # nothing outside the range

    assert a.post(READ, b, 2, len(data), offset=128 << 10, remote_offset=4096)["rc"] == 0
    (wc,) = a.poll_until(1)
    assert (wc["wr_id"], wc["status"], wc["opcode"]) == (2, WC_SUCCESS, WC_RDMA_READ)
    assert bytes.fromhex(a.peer.read(a.addr + (128 << 10), len(data))) == data


def test_an_idle_poller_naps_and_a_completion_still_reaches_it(peers):
    """A build's pollers spin on empty CQs; the emulator lends the core on each empty poll,
    and past the first few of a run it naps instead of yielding (forty engines' pollers share
    two cores here), so an idle poller blocks, and the next completion still reaches it."""
    a, b = connected_pair(peers(), peers())
    idle = a.peer.empty_polls(a.cq, 400)
    assert idle["got"] == 0
    assert idle["blocked"] >= 300, (
        f"400 empty polls blocked the polling thread {idle['blocked']} time(s): it spun "
        f"(yields) instead of napping")
    assert a.post(WRITE, b, 7, 4096)["rc"] == 0
    (wc,) = a.poll_until(1)
    assert (wc["wr_id"], wc["status"]) == (7, WC_SUCCESS)


def test_a_scatter_gather_list_lands_contiguously(peers):
    a, b = connected_pair(peers(), peers())
    pieces = [os.urandom(1000) for _ in range(3)]
    for i, piece in enumerate(pieces):  # every other 1000-byte piece
        a.peer.fill(a.addr + i * 2000, piece.hex())
    assert a.peer.post_gather(a.qp, 9, a.addr, 1000, a.key, 3, b.addr, b.key) == 0
    assert a.poll_until(1)[0]["status"] == WC_SUCCESS
    assert bytes.fromhex(b.peer.read(b.addr, 3000)) == b"".join(pieces)


def test_completions_of_one_qp_come_in_order_and_writes_apply_in_order(fabric, peers):
    """Under chaos delays (each WR waits a seeded random time before it executes) a QP still
    executes and completes in posting order: the last of 40 writes to one place wins."""
    env = {"MC_VERBS_CHAOS": "delay_us=300"}
    a, b = connected_pair(peers(env), peers(env))
    for i in range(40):
        a.peer.fill(a.addr + 8 * i, i.to_bytes(8, "little").hex())
    for i in range(40):  # each writes its own 8 bytes to remote offset 0
        assert a.peer.post(a.qp, WRITE, 100 + i, a.addr + 8 * i, 8, a.key, b.addr, b.key,
                           True, 1)["rc"] == 0
    wcs = a.poll_until(40)
    assert [w["wr_id"] for w in wcs] == list(range(100, 140))
    assert {w["status"] for w in wcs} == {WC_SUCCESS}
    assert int.from_bytes(bytes.fromhex(b.peer.read(b.addr, 8)), "little") == 39


def test_unsignaled_wrs_complete_silently_and_retire_with_the_next_signaled(peers):
    a, b = connected_pair(peers(), peers(), depth=4)
    assert a.post(WRITE, b, 1, 64, signaled=False, count=3)["rc"] == 0
    assert a.peer.poll(a.cq) == []
    # three slots are taken until a signaled completion is polled
    assert a.post(WRITE, b, 10, 64, count=2) == {"rc": 12, "bad_wr": 11}  # ENOMEM at the 2nd
    assert [w["wr_id"] for w in a.poll_until(1)] == [10]
    assert a.post(WRITE, b, 20, 64, count=4)["rc"] == 0  # all four slots free again


def test_a_full_send_queue_refuses_the_post_and_names_the_bad_wr(peers):
    a, b = connected_pair(peers(), peers(), depth=8)
    posted = a.post(WRITE, b, 1, 512, count=11)
    assert posted == {"rc": 12, "bad_wr": 9}  # ENOMEM; WRs 1..8 went in, 9.. did not
    assert [w["wr_id"] for w in a.poll_until(8)] == list(range(1, 9))
    assert a.post(WRITE, b, 9, 512, count=8)["rc"] == 0


def test_wrong_rkey_bounds_or_access_complete_with_rem_access_err(peers):
    pa, pb = peers(), peers()
    b_readonly = Endpoint(pb, access=ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ)
    cases = {
        "wrong rkey": dict(rkey_delta=1),
        "past the end": dict(remote_offset=(1 << 20) - 100),
        "no remote write": dict(target=b_readonly),
    }
    for what, case in cases.items():
        a, b = Endpoint(pa), case.get("target") or Endpoint(pb)
        a.connect(b)
        b.connect(a)
        rc = pa.post(a.qp, WRITE, 1, a.addr, 4096, a.key,
                     b.addr + case.get("remote_offset", 0), b.key + case.get("rkey_delta", 0),
                     True, 1)["rc"]
        assert rc == 0, what
        assert a.post(WRITE, b, 2, 64)["rc"] == 0  # behind the bad one
        wcs = a.poll_until(2)
        assert [(w["wr_id"], w["status"]) for w in wcs] == [
            (1, WC_REM_ACCESS_ERR), (2, WC_WR_FLUSH_ERR)], what
        assert pa.qp_state(a.qp) == QPS_ERR, what
        assert bytes.fromhex(pb.read(b.addr, 64)) == bytes(64), what
        # a WR posted to a QP in ERR is accepted and flushed
        assert a.post(WRITE, b, 3, 64)["rc"] == 0
        assert [(w["wr_id"], w["status"]) for w in a.poll_until(1)] == [(3, WC_WR_FLUSH_ERR)]
    # reading a read-only MR is fine
    a = Endpoint(pa)
    a.connect(b_readonly)
    b_readonly.connect(a)
    assert a.post(READ, b_readonly, 4, 64)["rc"] == 0
    assert a.poll_until(1)[0]["status"] == WC_SUCCESS


def test_a_deregistered_mr_and_a_bad_lkey_fail(peers):
    a, b = connected_pair(peers(), peers())
    assert a.peer.post(a.qp, WRITE, 1, a.addr, 64, a.key + 1, b.addr, b.key, True, 1)["rc"] == 0
    assert a.poll_until(1)[0]["status"] == WC_LOC_PROT_ERR
    a, b = connected_pair(a.peer, b.peer)
    assert b.peer.dereg(b.mr) == 0
    assert a.post(WRITE, b, 2, 64)["rc"] == 0
    assert a.poll_until(1)[0]["status"] == WC_REM_ACCESS_ERR


def test_a_peer_that_died_fails_the_next_wr_like_retry_exceeded(peers):
    pb = peers()
    a, b = connected_pair(peers(), pb)
    assert a.post(WRITE, b, 1, 64)["rc"] == 0
    assert a.poll_until(1)[0]["status"] == WC_SUCCESS
    pb.kill()
    assert a.post(WRITE, b, 2, 64, count=2)["rc"] == 0
    assert [(w["wr_id"], w["status"]) for w in a.poll_until(2)] == [
        (2, WC_RETRY_EXC_ERR), (3, WC_WR_FLUSH_ERR)]


def test_a_destroyed_or_unconnected_remote_qp_is_retry_exceeded(peers):
    a, b = connected_pair(peers(), peers())
    assert b.peer.destroy_qp(b.qp) == 0
    assert a.post(WRITE, b, 1, 64)["rc"] == 0
    assert a.poll_until(1)[0]["status"] == WC_RETRY_EXC_ERR


def test_qp_state_machine_refuses_skipped_states_and_posts_before_rts(peers):
    p = peers()
    e = Endpoint(p)
    assert p.qp_state(e.qp) == QPS_RESET
    assert p.modify(e.qp, QPS_RTS, IBV_QP_STATE) == 22  # RESET -> RTS: EINVAL
    assert p.modify(e.qp, QPS_INIT, IBV_QP_STATE) == 22  # INIT without port/pkey/access
    assert p.modify(e.qp, QPS_INIT, 1 | 16 | 32 | 8) == 0  # STATE|PKEY|PORT|ACCESS
    assert p.post(e.qp, WRITE, 1, e.addr, 64, e.key, e.addr, e.key)["rc"] == 22  # not RTS
    assert p.modify(e.qp, QPS_RTR, IBV_QP_STATE) == 22  # RTR needs AV, DEST_QPN, ...
    assert p.qp_state(e.qp) == QPS_INIT
    assert p.modify(e.qp, QPS_ERR, IBV_QP_STATE) == 0  # anything -> ERR
    assert p.modify(e.qp, QPS_RESET, IBV_QP_STATE) == 0  # anything -> RESET
    assert p.qp_state(e.qp) == QPS_RESET
    assert QPS_RTR < QPS_RTS  # (the order the enum has)


def test_flush_on_err_completes_every_unexecuted_wr_in_order(peers):
    """WRs that have not executed yet (held back by a long chaos delay) are flushed, in order,
    signaled or not, when the QP goes to ERR, and their bytes never land."""
    env = {"MC_VERBS_CHAOS": "delay_us=60000000"}
    a, b = connected_pair(peers(env), peers())
    a.peer.fill(a.addr, ("ab" * 64))
    assert a.post(WRITE, b, 1, 64, count=3)["rc"] == 0
    assert a.post(WRITE, b, 4, 64, signaled=False, count=2)["rc"] == 0
    assert a.peer.poll(a.cq) == []
    assert a.peer.modify(a.qp, QPS_ERR, IBV_QP_STATE) == 0
    wcs = a.poll_until(5)
    assert [(w["wr_id"], w["status"]) for w in wcs] == [(i, WC_WR_FLUSH_ERR) for i in range(1, 6)]
    assert bytes.fromhex(b.peer.read(b.addr, 64 * 5)) == bytes(64 * 5)


def test_a_full_cq_overruns_with_an_async_cq_err(peers):
    a, b = connected_pair(peers(), peers(), cqe=4, depth=16)
    assert a.post(WRITE, b, 1, 64, count=6)["rc"] == 0
    event = a.peer.async_event(a.ctx, 10000)
    assert event is not None and event["type"] == 0  # IBV_EVENT_CQ_ERR
    assert [w["wr_id"] for w in a.poll_until(4)] == [1, 2, 3, 4]  # 5 and 6 were lost
    assert a.peer.poll(a.cq) == []


def test_completion_channel_signals_the_next_completion_after_arming(peers):
    a, b = connected_pair(peers(), peers(), channel=True)
    assert a.peer.cq_event(a.cq, 0) == 0
    assert a.peer.notify(a.cq) == 0
    assert a.post(WRITE, b, 1, 64)["rc"] == 0
    assert a.peer.cq_event(a.cq, 10000) == 1
    assert a.post(WRITE, b, 2, 64)["rc"] == 0  # not armed again: no second event
    assert a.peer.cq_event(a.cq, 0) == 0
    assert [w["wr_id"] for w in a.poll_until(2)] == [1, 2]


def test_fork_keeps_the_parent_working_and_its_registrations_its_own(fabric, peers):
    pa = peers()
    a, b = connected_pair(pa, peers())
    assert pa.fork_init() == 0
    parent_socket = fabric.control_socket(pa.pid)
    assert parent_socket.exists()
    child = pa.fork_child([
        # the parent's MR is not the child's: a WR with it fails locally
        ["post", a.qp, WRITE, 1, a.addr, 64, a.key, b.addr, b.key],
        ["poll", a.cq],
        # the child can use devices of its own
        ["open", "mlx5_1"],
        ["pid"],
    ])
    assert child["exit"] == 0, child
    results = [r.get("ok", r.get("error")) for r in child["results"]]
    assert results[0]["rc"] == 0
    assert [w["status"] for w in results[1]] == [WC_LOC_PROT_ERR]
    assert results[3] == child["pid"] != pa.pid
    # the child's exit (with C destructors) took nothing of the parent's
    assert parent_socket.exists()
    assert not fabric.control_socket(child["pid"]).exists()
    data = os.urandom(256)
    pa.fill(a.addr, data.hex())
    assert a.post(WRITE, b, 7, 256)["rc"] == 0
    assert [w["status"] for w in a.poll_until(1)] == [WC_SUCCESS]
    assert bytes.fromhex(b.peer.read(b.addr, 256)) == data


def test_without_a_run_directory_there_are_no_devices(probe_library, tmp_path):
    lib = library_path()
    script = (
        "import ctypes, sys\n"
        f"p = ctypes.CDLL({str(probe_library)!r})\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "print(p.p_devices(buf, 256))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_VERBS")}
    env["LD_LIBRARY_PATH"] = str(lib.parent)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "0"
    assert "MC_VERBS_RUN_DIR is not set" in done.stderr


def test_rdma_cores_librdmacm_binds_to_the_emulated_library(fabric):
    """librdmacm imports only public verbs symbols, every one of which the emulation exports
    at rdma-core's version: loaded with RTLD_NOW under the fabric, it resolves against it."""
    script = (
        "import ctypes, os\n"
        "ctypes.CDLL('librdmacm.so.1', mode=os.RTLD_NOW)\n"
        "maps = open('/proc/self/maps').read()\n"
        "print([l.split()[-1] for l in maps.splitlines() if 'libibverbs' in l][0])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=fabric.apply(), capture_output=True,
                          text=True, timeout=60)
    if "librdmacm.so.1: cannot open shared object file" in done.stderr:
        pytest.skip("n/a: rdma-core's librdmacm1 is not installed here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(library_path())
