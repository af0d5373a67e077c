"""The docker target: SPEC parsing, n/a without a container engine (bounded), and, where the
run can have an engine (``containers.session_engine``: Podman here), Mooncake engines as real
containers of ``localhost/mooncake:0.3.13.post1`` (built by ``python -m pytest_mooncake.images``)."""

from __future__ import annotations

import ipaddress
import signal
import socket
import threading

import pytest

from pytest_mooncake.container_engine import session_engine
from pytest_mooncake.container_engine.run_networks import subnet_of
from pytest_mooncake.targets import UnknownTarget, resolve_target
from pytest_mooncake.targets.base import Capability, TargetContext, TargetLacks
from pytest_mooncake.targets.mooncake.placements.containers import (
    CONTROL_PORT,
    DockerTarget,
    mac_for,
    parse_image,
)

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("targets/test_docker_target")

IMAGE = "kvcacheai/mooncake:0.3.13"
RELEASE_IMAGE = "localhost/mooncake:0.3.13.post1"


# ------------------------------------------------------------------------------ parsing


def test_spec_names_the_image():
    target = resolve_target(f"docker:{IMAGE}")
    assert isinstance(target, DockerTarget) and target.image == IMAGE
    assert target.label == f"docker:{IMAGE}"
    assert parse_image("registry.local:5000/team/mooncake@sha256:" + "a" * 64)


@pytest.mark.parametrize("spec, message", [
    ("docker", "needs an image"),
    ("docker:", "needs an image"),
    ("docker:Upper/Case", "not a valid image reference"),
    ("docker:bad image", "not a valid image reference"),
])
def test_bad_specs_are_usage_errors(spec, message):
    with pytest.raises(UnknownTarget, match=message):
        resolve_target(spec)


# ------------------------------------------------------------------------------ n/a here


def test_without_any_engine_everything_is_na_naming_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman, no runc
    monkeypatch.setattr(session_engine, "DOCKER_SOCKET", str(tmp_path / "docker.sock"))
    target = DockerTarget(IMAGE)
    assert target.capabilities == frozenset()
    for cap in Capability:
        reason = target.missing(cap)
        assert reason.startswith("no container engine: DOCKER_HOST is not set")
        assert "podman and runc not installed (scripts/setup.sh installs" in reason
    with pytest.raises(TargetLacks, match="no container engine"):
        target.start_engine("seg", metadata=None)


def test_docker_host_that_never_answers_is_na_within_the_ping_timeout(monkeypatch):
    """A listener that accepts and never replies: the probe must give up, not hang."""
    listener = socket.create_server(("127.0.0.1", 0))
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        url = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setenv("DOCKER_HOST", url)
        target = DockerTarget(IMAGE, ping_timeout=1.0)
        assert target.capabilities == frozenset()
        assert target.missing(Capability.ENGINE).startswith(f"no Docker engine at DOCKER_HOST={url}: ")
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_session_with_docker_target_reports_na_not_errors(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    pytester.makepyfile(test_tiny='''
import pytest

@pytest.mark.mc_requires("engine")
def test_engine(mc_engine):
    mc_engine("x")

def test_master_without_marker(mc_master_cluster):
    mc_master_cluster(masters=2)
''')
    result = pytester.runpytest_subprocess(
        "-p", "pytest_mooncake", f"--mc-target=docker:{IMAGE}", "-rs", timeout=120)
    result.assert_outcomes(skipped=2)
    out = result.stdout.str()
    assert out.count("n/a: no Docker engine at DOCKER_HOST=") == 2
    assert f"target=docker:{IMAGE}" in out




# ------------------------------------------------------------------ real containers (Podman)


@pytest.fixture(scope="module")
def docker_target(tmp_path_factory):
    """``docker:localhost/mooncake:0.3.13.post1`` on the run's engine (the image is built
    first when missing: about 4 minutes once per machine, then cached)."""
    reason = session_engine.probe()
    if reason:
        pytest.skip(f"n/a: {reason}")
    from pytest_mooncake.images.release_image import ensure_release_image

    engine = session_engine.ContainerEngine().start()
    try:
        ensure_release_image(engine.client, "0.3.13.post1", lambda _m: None)
    finally:
        engine.close()
    target = DockerTarget(RELEASE_IMAGE)
    target.open(TargetContext(seed=7, workdir=tmp_path_factory.mktemp("docker-target")))
    try:
        yield target
    finally:
        target.close()


def test_engines_in_containers_transfer_and_restart_under_the_same_name(docker_target):
    assert docker_target.missing(Capability.ENGINE) is None
    lab = docker_target.placement.lab()
    meta = docker_target.metadata_store("etcd")
    a = docker_target.start_engine("dk-a", meta)
    b = docker_target.start_engine("dk-b", meta)
    try:
        assert a.process.address != b.process.address
        for proc in (a.process, b.process):
            assert ipaddress.ip_address(proc.address) in subnet_of(lab.network)
            proc.container.reload()
            settings = proc.container.attrs["NetworkSettings"]["Networks"][lab.network.name]
            assert settings["MacAddress"] == mac_for(proc.address)  # kept across restarts
        assert a.write(b.segment, 0, b"through-containers").ok
        assert b.local_read(0, 18) == b"through-containers"
        first = a.process.container
        a.kill()
        # the component died, its container (and address) stays: a peer is refused at once, as
        # by a killed process on one host, instead of sending into a vanished address
        assert not a.alive() and a.process.returncode == 128 + signal.SIGKILL
        first.reload()
        assert first.status == "running"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((a.process.address, CONTROL_PORT), timeout=5)
        a.restart()
        assert a.process.container.id != first.id and a.alive()
        assert b.write_at(a.segment, a.buffers()[0][0], b"after").ok
        b.process.partition()
        b.process.container.reload()
        assert lab.network.name not in b.process.container.attrs["NetworkSettings"]["Networks"]
        b.process.heal()
        b.process.container.reload()
        networks = b.process.container.attrs["NetworkSettings"]["Networks"]
        assert networks[lab.network.name]["IPAddress"] == b.process.address
        assert networks[lab.network.name]["MacAddress"] == mac_for(b.process.address)
        assert b.write_at(a.segment, a.buffers()[0][0], b"healed").ok
    finally:
        a.stop()
        b.stop()
        meta.close()


def test_engines_in_containers_move_bytes_over_emulated_rdma(docker_target):
    """Engine containers on one emulated fabric: RDMA work requests between two containers
    (``process_vm_writev`` by host pid), each NIC controlled through a socket named by the
    engine's host pid (the containers share the host's pid namespace)."""
    docker_target.use_verbs("emulated:mlx5_0,mlx5_1")
    assert docker_target.missing(Capability.RDMA_CONTROL) is None
    handle = docker_target.rdma(seed=7)
    try:
        cluster = handle.cluster()
        cluster.add_node("A", ["mlx5_0"])
        cluster.add_node("B", ["mlx5_1"])
        for node in cluster.nodes.values():
            process = node.engine.process
            assert process.container.attrs["HostConfig"]["PidMode"] == "host"
            assert cluster.fabric.control_socket(process.pid).exists()
        payload = bytes(range(256)) * 33
        cluster.write_local("A", 0, payload)
        out = cluster.submit("A", "B", len(payload))
        assert cluster.settle() and cluster.status(out) == "COMPLETED"
        assert cluster.read("B", 0, len(payload)) == payload
        assert cluster.posts(out, 0), "the bytes moved, but not as RDMA work requests"
        assert not cluster.check()
    finally:
        handle.close()


def test_docker_targets_of_one_process_share_network_etcd_and_relays(docker_target,
                                                                    tmp_path_factory):
    """A skew role's docker target (another image in a rolling upgrade; here the same image,
    which the engine treats alike) joins the session target's network and etcd: its engines and
    the session's find and reach each other, and closing the role leaves the session's lab."""
    role = DockerTarget(RELEASE_IMAGE)
    role.open(TargetContext(seed=8, workdir=tmp_path_factory.mktemp("docker-role")))
    lab = docker_target.placement.lab()
    meta = docker_target.metadata_store("etcd")
    try:
        assert role.placement.lab() is lab
        role_meta = role.metadata_store("etcd")
        assert role_meta.address == meta.address == docker_target.peer_etcd()[0]
        assert docker_target.peer_host("skew role old") == lab.gateway
        a = docker_target.start_engine("share-a", meta)
        b = role.start_engine("share-b", role_meta)
        try:
            assert b.write(a.segment, 0, b"across-targets").ok
            assert a.local_read(0, 14) == b"across-targets"
        finally:
            a.stop()
            b.stop()
    finally:
        role.close()
    assert docker_target.placement.lab() is lab and lab.network is not None
    c = docker_target.start_engine("share-c", meta)
    assert c.alive()
    c.stop()
    meta.close()


def test_the_etcd_container_stops_and_starts_again_with_its_keys(docker_target):
    """What the store-outage suites stop under the docker target: its etcd container, which
    refuses while stopped and keeps its keys when started again (same address)."""
    meta = docker_target.metadata_store("etcd")
    meta.put("mc-test/outage", b"kept")
    server = docker_target.metadata_server(meta)
    assert server is not None and server.alive()
    address = server.process.address
    server.stop()
    assert not server.alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, 2379), timeout=5)
    server.start()
    assert server.alive() and server.process.address == address
    fresh = docker_target.metadata_store("etcd")
    assert fresh.get("mc-test/outage") == b"kept"
    fresh.close()
    meta.close()
