"""The docker target: SPEC parsing, n/a without a Docker engine (bounded), and container
handling against a fake docker client object (unit level; no Docker engine runs here)."""

from __future__ import annotations

import os
import signal
import socket
import threading

import pytest

from pytest_mooncake.runtime.processes import ProcessStartError
from pytest_mooncake.targets import UnknownTarget, resolve_target
from pytest_mooncake.targets.base import Capability, TargetContext, TargetLacks
from pytest_mooncake.targets.mooncake.placements.containers import (
    API_TIMEOUT,
    CONTROL_PORT,
    ContainerLauncher,
    ContainerProcess,
    DockerLab,
    DockerTarget,
    parse_image,
)

IMAGE = "kvcacheai/mooncake:0.3.13"

# ------------------------------------------------------------------------------ fake SDK


class FakeContainer:
    def __init__(self, client, image, command, **kwargs):
        self.client = client
        self.image = image
        self.command = command
        self.kwargs = kwargs
        self.name = kwargs["name"]
        self.status = "running"
        self.exit_code = None
        self.signals = []
        self.stopped_with = None
        self.removed = False
        self.fail_remove = False
        self.ports = {}

    @property
    def attrs(self):
        return {"State": {"Status": self.status, "Pid": 4242 if self.status == "running" else 0,
                          "ExitCode": self.exit_code}}

    def reload(self):
        if self.removed:
            raise LookupError("No such container")
        self.ports = {port: [{"HostIp": "127.0.0.1", "HostPort": str(30000 + i)}]
                      for i, port in enumerate(self.kwargs.get("ports", {}))}

    def kill(self, signal=None):
        self.signals.append(signal)
        self.status, self.exit_code = "exited", 128 + int(signal)

    def stop(self, timeout=None):
        self.stopped_with = timeout
        self.status, self.exit_code = "exited", 0

    def wait(self, timeout=None):
        return {"StatusCode": self.exit_code}

    def logs(self, tail=None):
        return b"line one\ndriver ready: {}\n"

    def remove(self, force=False):
        if self.fail_remove:
            raise RuntimeError("device busy")
        self.removed = True
        self.status = "removed"


class FakeCollection:
    def __init__(self, client):
        self.client = client
        self.created = []


class FakeContainers(FakeCollection):
    def run(self, image, command=None, **kwargs):
        assert kwargs.get("detach") is True, "containers are always run detached"
        container = FakeContainer(self.client, image, command, **kwargs)
        self.created.append(container)
        return container


class FakeNetwork:
    def __init__(self, name, **kwargs):
        self.name = name
        self.kwargs = kwargs
        self.removed = False

    def remove(self):
        self.removed = True


class FakeNetworks(FakeCollection):
    def create(self, name, **kwargs):
        net = FakeNetwork(name, **kwargs)
        self.created.append(net)
        return net


class FakeImage:
    short_id = "sha256:abc123"
    labels = {"org.opencontainers.image.version": "0.3.13"}


class FakeImages(FakeCollection):
    def get(self, name):
        return FakeImage()


class FakeDockerClient:
    def __init__(self):
        self.containers = FakeContainers(self)
        self.networks = FakeNetworks(self)
        self.images = FakeImages(self)
        self.pings = 0

    def ping(self):
        self.pings += 1
        return True


@pytest.fixture
def lab(tmp_path):
    return DockerLab(FakeDockerClient(), IMAGE, "s1", tmp_path)


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


def test_without_docker_engine_everything_is_na_with_the_socket_named(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    target = DockerTarget(IMAGE)
    assert target.capabilities == frozenset()
    for cap in Capability:
        reason = target.missing(cap)
        assert reason.startswith("no Docker engine at DOCKER_HOST=unix:///var/run/docker.sock: ")
    with pytest.raises(TargetLacks, match="no Docker engine"):
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


def test_session_with_docker_target_reports_na_not_errors(pytester: pytest.Pytester):
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


# ------------------------------------------------------------------------------ fake client


def test_probe_with_an_answering_engine_reads_the_image(tmp_path):
    fake = FakeDockerClient()
    target = DockerTarget(IMAGE, client_factory=lambda timeout: fake)
    assert Capability.ENGINE in target.capabilities and Capability.MASTER_CLUSTER in target.capabilities
    assert fake.pings == 1
    assert target.version == f"{IMAGE} (0.3.13)"
    assert "no means for cache_ttl" in target.missing(Capability.CACHE_TTL)


def test_only_the_probe_uses_the_short_timeout(tmp_path):
    """The ping is bounded by ping_timeout; the client kept for pulls and waits is not."""
    asked = []
    probe_client, work_client = FakeDockerClient(), FakeDockerClient()
    clients = iter([probe_client, work_client])
    target = DockerTarget(IMAGE, client_factory=lambda timeout: asked.append(timeout) or next(clients),
                          ping_timeout=2.0)
    assert target.probe() is None
    assert asked == [2.0, API_TIMEOUT] and probe_client.pings == 1
    assert target.client is work_client


def test_container_is_run_detached_on_the_session_network_with_loopback_ports(lab):
    proc = ContainerProcess(lab, "engine-a", ["python3", "/mc-driver/mooncake_driver.py", "engine"],
                            {"MC_X": "1"}, None, 5, publish=[CONTROL_PORT]).start()
    run = lab.client.containers.created[0]
    assert run.image == IMAGE and run.command == ["python3", "/mc-driver/mooncake_driver.py", "engine"]
    assert run.kwargs["network"] == "mc-s1" and run.kwargs["name"] == "mc-s1-engine-a"
    assert run.kwargs["ports"] == {f"{CONTROL_PORT}/tcp": ("127.0.0.1", None)}
    assert run.kwargs["environment"] == {"MC_X": "1"}
    assert run.kwargs["volumes"][lab.driver_dir] == {"bind": "/mc-driver", "mode": "ro"}
    assert run.kwargs["volumes"][str(lab.workdir)]["bind"] == str(lab.workdir)
    assert lab.client.networks.created[0].kwargs["driver"] == "bridge"
    assert proc.alive() and proc.pid == 4242
    assert proc.published(CONTROL_PORT) == 30000
    assert "driver ready" in proc.log_tail(1)


def test_kill_sends_the_signal_and_restart_replaces_the_container(lab):
    proc = ContainerProcess(lab, "m0", ["mooncake_master"], {}, None, 5).start()
    first = proc.container
    assert proc.kill(signal.SIGKILL) == 128 + signal.SIGKILL
    assert first.signals == [signal.SIGKILL] and not proc.alive()
    proc.start()
    assert first.removed and proc.container is not first and proc.alive()
    proc.terminate(timeout=2)
    assert proc.container.stopped_with == 2 and proc.returncode == 0


def test_container_that_exits_before_ready_is_a_start_error(lab):
    class DiesAtOnce(FakeContainers):
        def run(self, image, command=None, **kwargs):
            c = super().run(image, command, **kwargs)
            c.status, c.exit_code = "exited", 3
            return c

    lab.client.containers = DiesAtOnce(lab.client)
    with pytest.raises(ProcessStartError, match="exited with 3 before it was ready"):
        ContainerProcess(lab, "e", ["x"], {}, lambda p: False, 5).start()


def test_close_removes_every_container_and_the_network_even_if_one_fails(lab):
    for name in ("a", "b", "c"):
        ContainerProcess(lab, name, ["x"], {}, None, 5).start()
    stuck = lab.client.containers.created[1]
    stuck.fail_remove = True
    problems = lab.close()
    assert problems == ["container mc-s1-b: device busy"]
    assert [c.removed for c in lab.client.containers.created] == [True, False, True]
    assert lab.client.networks.created[0].removed and lab.containers == []


def test_launcher_runs_the_driver_and_master_inside_the_image(lab):
    launcher = ContainerLauncher(lab, IMAGE)
    assert launcher.driver_argv("engine", "--segment", "s") == [
        "python3", "/mc-driver/mooncake_driver.py", "engine", "--segment", "s"]
    assert launcher.master_binary() == "mooncake_master"
    assert launcher.master_rpc["rpc_interface"] == "eth0"
    assert launcher.master_flags.has("enable_oplog") and "not probed" in launcher.master_flags.source
    assert launcher.host_name("client-0") == "mc-s1-client-0"
    assert launcher.port() != launcher.port()


def test_target_session_tears_down_its_lab(tmp_path):
    fake = FakeDockerClient()
    target = DockerTarget(IMAGE, client_factory=lambda timeout: fake)
    target.open(TargetContext(seed=5, workdir=tmp_path))
    lab = target.placement.lab()
    ContainerProcess(lab, "x", ["x"], {}, None, 5).start()
    target.close()
    assert fake.containers.created[0].removed and fake.networks.created[0].removed


# ------------------------------------------------------------------ handles over containers


class LocalProcessContainers(FakeContainers):
    """A fake docker client whose "containers" are local driver processes: the command's
    in-container driver path is mapped to this checkout, the fixed control port to a free
    loopback port reported as the published one. It exercises the engine handle's container
    path (ready file through the shared workdir, published ports, kill, restart) for real."""

    def run(self, image, command=None, **kwargs):
        import subprocess
        import sys

        from pytest_mooncake.runtime.ports import free_port
        from pytest_mooncake.targets.mooncake.install import DRIVER

        container = super().run(image, command, **kwargs)
        argv = [sys.executable if a == "python3" else
                str(DRIVER) if a == "/mc-driver/mooncake_driver.py" else a for a in command]
        published = {}
        if "--control-port" in argv:
            i = argv.index("--control-port")
            port = free_port()
            published[f"{argv[i + 1]}/tcp"] = port
            argv[i + 1] = str(port)
            argv[argv.index("--control-host") + 1] = "127.0.0.1"
        env = dict(os.environ, MC_TCP_BIND_ADDRESS="127.0.0.1", **kwargs["environment"])
        container.popen = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True)
        container.published = published
        return container


def _local_reload(self):
    if self.removed:
        raise LookupError("No such container")
    if self.popen.poll() is not None and self.status == "running":
        self.status, self.exit_code = "exited", self.popen.returncode
    self.ports = {p: [{"HostIp": "127.0.0.1", "HostPort": str(h)}] for p, h in self.published.items()}


def _local_kill(self, signal=None):
    os.killpg(self.popen.pid, int(signal))
    self.popen.wait(10)
    self.signals.append(signal)


def _local_remove(self, force=False):
    if self.popen.poll() is None:
        os.killpg(self.popen.pid, 9)
        self.popen.wait(10)
    self.removed = True


def _local_wait(self, timeout=None):
    return {"StatusCode": self.popen.wait(timeout)}


@pytest.fixture
def local_docker(monkeypatch):
    monkeypatch.setattr(FakeContainer, "reload", _local_reload)
    monkeypatch.setattr(FakeContainer, "kill", _local_kill)
    monkeypatch.setattr(FakeContainer, "remove", _local_remove)
    monkeypatch.setattr(FakeContainer, "wait", _local_wait)
    client = FakeDockerClient()
    client.containers = LocalProcessContainers(client)
    yield client
    for container in client.containers.created:
        if container.popen.poll() is None:
            os.killpg(container.popen.pid, signal.SIGKILL)
            container.popen.wait(10)


def test_engine_handles_over_container_launcher(local_docker, mooncake_target, mc_etcd, tmp_path):
    from pytest_mooncake.targets.mooncake.driver.engine_proxies import MooncakeEngine
    from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata

    lab = DockerLab(local_docker, IMAGE, "s2", tmp_path)
    launcher = ContainerLauncher(lab, IMAGE)
    meta = EtcdMetadata(list(mc_etcd.endpoints))
    tag = os.getpid()
    a = MooncakeEngine(launcher, tmp_path, f"dk-a-{tag}", meta, {})
    b = MooncakeEngine(launcher, tmp_path, f"dk-b-{tag}", meta, {})
    try:
        run = local_docker.containers.created[0]
        assert run.command[:2] == ["python3", "/mc-driver/mooncake_driver.py"]
        assert run.kwargs["ports"] == {"7000/tcp": ("127.0.0.1", None)}
        assert a.write(b.segment, 0, b"through-containers").ok
        assert b.local_read(0, 18) == b"through-containers"
        first = a.process.container
        a.restart()
        assert first.removed and a.process.container is not first and a.alive()
        assert first.signals == [signal.SIGKILL]
        assert b.write_at(a.segment, a.buffers()[0][0], b"after").ok
    finally:
        a.stop()
        b.stop()
        assert lab.close() == []
    assert all(c.popen.poll() is not None for c in local_docker.containers.created)
