"""The ``docker`` target: Mooncake from a container image, driven through the docker SDK.

``--mc-target=docker:IMAGE`` (e.g. ``docker:localhost/mooncake:0.3.13.post1``, built here by
``python -m pytest_mooncake.images build 0.3.13.post1``). The engine is the run's
(``containers.session_engine``: DOCKER_HOST, a Docker, or a Podman the run starts). The session
gets its own internal bridge network on a /24 of 198.18.0.0/15 (``containers.run_networks``);
etcd runs as a container of the same image on it (Debian's etcd is in the images built here;
``MC_DOCKER_ETCD_IMAGE`` names another); engines, store clients and ``mooncake_master`` run as
containers of IMAGE with the same driver script as the ``mooncake`` target, mounted read-only,
each at a fixed address of the network that its restarts keep, with ``MC_TCP_BIND_ADDRESS`` set
to it. No port is published: this host reaches every container at its address directly (its
end of the bridge is the network's ``.1``). The session's work directory is bind-mounted at the
same path so drivers' ready files appear here, which needs the engine on this host.

No container engine is not an error: the first capability question looks for one, and when
there is none every capability is absent with the reason (what is missing, how to install it).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_mooncake.container_engine.labels import SESSION_LABEL, session_labels
from pytest_mooncake.container_engine.run_networks import create_network, subnet_of
from pytest_mooncake.container_engine.session_engine import ContainerEngine, EngineUnavailable
from pytest_mooncake.container_engine.tcp_relay import TcpRelay
from pytest_mooncake.images.release_image import RELEASE_LABEL
from pytest_mooncake.releases.record import recorded
from pytest_mooncake.runtime.deadlines import Timeout, wait_until, within
from pytest_mooncake.runtime.etcd_process import etcd_healthy
from pytest_mooncake.runtime.processes import ProcessStartError, ReadyProbe, port_open
from pytest_mooncake.targets.base import Capability, MetadataHandle, TargetError, TargetLacks
from pytest_mooncake.targets.mooncake.adapter import MooncakeFamilyTarget
from pytest_mooncake.targets.mooncake.install import DRIVER
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata, HttpMetadata
from pytest_mooncake.targets.mooncake.placements import container_run
from pytest_mooncake.targets.mooncake.placements.container_fabric import (
    ImageEnvironment,
    fabric_run_options,
)
from pytest_mooncake.targets.mooncake.placements.container_run import ContainerRun
from pytest_mooncake.targets.mooncake.placements.spawned import ProcessPlacement

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
DRIVER_DIR_IN_CONTAINER = "/mc-driver"
CONTROL_PORT = 7000
ASSUMED_RELEASE = "non-cuda-0.3.13.post1"
"""The release whose probed master flags stand for an image's (see ``assumed_master_flags``)."""
ETCD_PORT = 2379
HTTP_METADATA_PORT = 8080
_IMAGE_RE = re.compile(
    r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?/)?"  # registry host[:port]/
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$")
CONTAINER_LACKS: dict[Capability, str] = {}
"""What an image built here lacks although its release has the means (this placement's gaps;
emulated RDMA runs in containers sharing the host's pid namespace, ``container_fabric.py``)."""
SUPPORTED = frozenset({Capability.ENGINE, Capability.ENGINE_RESTART, Capability.METADATA_ETCD,
                       Capability.MASTER_CLUSTER, Capability.PROMOTABILITY})
"""(promotability is probed live by the first ``promotable()`` of a running master)"""


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def parse_image(spec: str | None) -> str:
    """The IMAGE of ``docker:IMAGE``; raises ``ValueError`` naming what is wrong."""
    image = (spec or "").strip()
    if not image:
        raise ValueError("the docker target needs an image: --mc-target=docker:IMAGE "
                         "(e.g. docker:kvcacheai/mooncake:0.3.13)")
    if not _IMAGE_RE.match(image):
        raise ValueError(f"--mc-target=docker:{image}: {image!r} is not a valid image reference "
                         f"([registry/]name[:tag][@sha256:digest], lower-case name)")
    return image


API_TIMEOUT = 600.0
"""Seconds one Docker API request may take once the engine answered (an image pull, a wait)."""


# ------------------------------------------------------------------------------- containers


ADDRESS = "@container-address@"
"""In an argv element or environment value: replaced by the container's own address on the
session network when it starts (``MC_TCP_BIND_ADDRESS``, a master's ``--rpc_address``)."""


HOLDER = ["sh", "-c", '"$@"; echo "mc-component-exit=$?"; exec sleep infinity', "mc-holder"]
"""Every component runs as the child of a shell that outlives it: a killed component leaves its
container, network namespace and address behind until the restart replaces them, so peers get
connection refused/reset at once, as from a process killed on one host. (Killing the container
instead removes the address altogether: packets to it vanish, which 0.3.13's store client does
not recover from within MP-7's bound.)"""
EXIT_MARK = re.compile(r"^mc-component-exit=(\d+)$", re.M)


def mac_for(address: str) -> str:
    """A locally administered MAC fixed by ``address``: a restarted container (same address)
    keeps it, so its peers' neighbour caches stay right. With a new MAC they would send to the
    old one until the entry goes stale (about 30 s here), which no process on one host sees."""
    return "02:42:" + ":".join(f"{int(part):02x}" for part in address.split("."))


class ContainerProcess:
    """A container that behaves like ``ManagedProcess`` for the engine and master handles:
    start (again, as a new container with the same name and address), readiness, kill with a
    signal, stop, logs, and the address this host reaches it at."""

    def __init__(self, lab: DockerLab, name: str, argv: Sequence[str],
                 env: Mapping[str, str] | None, ready: ReadyProbe | None,
                 ready_timeout: float, publish: Sequence[int] = (), image: str | None = None):
        self.lab = lab
        self.image = image
        """The image it runs (None: the lab's; a skew role's target runs its own)."""
        self.name = name
        self.argv = [str(a) for a in argv]
        self.env = dict(env or {})
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.publish = list(publish)
        self.container: Any = None
        self.starts = 0
        self.unique_name, self.address = lab.claim(name)
        self._exited: int | None = None
        self._cpid: int | None = None

    def start(self) -> ContainerProcess:
        if self.container is not None:
            self.lab.remove(self.container)
        argv = HOLDER + [a.replace(ADDRESS, self.address) for a in self.argv]
        self._exited, self._cpid = None, None
        env = {"MC_TCP_BIND_ADDRESS": ADDRESS, **self.env}
        env = {k: v.replace(ADDRESS, self.address) for k, v in env.items()}
        self.container = self.lab.run(self.unique_name, argv, env, self.address, self.image)
        self.starts += 1
        if self.ready is not None:
            self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        probe = self.ready

        def ready_or_exited() -> bool:
            if probe is None or probe(self):
                return True
            if not self.alive():
                raise ProcessStartError(f"container {self.name} exited with {self.returncode} "
                                        f"before it was ready; last log lines:\n{self.log_tail()}")
            return False

        try:
            wait_until(ready_or_exited, self.ready_timeout, f"container {self.name} to be ready",
                       interval=0.05, max_interval=0.5)
        except Timeout:
            self.kill()
            raise ProcessStartError(f"container {self.name} was not ready within "
                                    f"{self.ready_timeout:.0f}s; killed it. Last log lines:\n"
                                    f"{self.log_tail()}") from None

    def _state(self) -> Mapping[str, Any]:
        if self.container is None:
            return {}
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 (a removed container has no state)
            return {}
        return self.container.attrs.get("State", {})

    def _exit_status(self) -> int | None:
        """The component's exit status, once the holder logged it."""
        if self._exited is None and self.container is not None:
            found = EXIT_MARK.findall(self.log_text())
            if found:
                self._exited = int(found[-1])
        return self._exited

    def _component(self) -> int | None:
        """The component's pid as this host sees it: the holder's (PID 1's) only child."""
        if self._cpid is None:
            holder = self._state().get("Pid")
            try:
                children = Path(f"/proc/{holder}/task/{holder}/children").read_text().split()
            except (OSError, TypeError):
                children = []
            if children:
                self._cpid = int(children[0])
        return self._cpid

    def alive(self) -> bool:
        return self._state().get("Status") == "running" and self._exit_status() is None

    @property
    def pid(self) -> int | None:
        return self._component() if self.alive() else None

    @property
    def returncode(self) -> int | None:
        status = self._exit_status()
        if status is not None:
            return status
        state = self._state()
        return None if not state or state.get("Status") == "running" else state.get("ExitCode")

    def published(self, port: int) -> int:
        """The port this host reaches ``port`` at (the same: the host reaches the container's
        address on the session network directly, no port is published)."""
        return port

    def send_signal(self, sig: int) -> None:
        """To the component process only: its container, and so its address, stays."""
        if self.container is None or not self.alive():
            return
        pid = self._component()
        if pid is None:
            self.container.kill(signal=int(sig))
            return
        try:
            os.kill(pid, int(sig))
        except ProcessLookupError:
            pass

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        self.send_signal(sig)
        return self.wait_exit(10) if sig in (signal.SIGKILL, signal.SIGTERM) else None

    def terminate(self, timeout: float | None = None) -> int | None:
        self.send_signal(signal.SIGTERM)
        if self.wait_exit(timeout if timeout is not None else 5) is None:
            self.kill(signal.SIGKILL)
        return self.returncode

    stop = terminate

    def wait_exit(self, timeout: float) -> int | None:
        if self.container is None:
            return None
        try:
            wait_until(lambda: not self.alive(), timeout, f"{self.name} to exit",
                       interval=0.05, max_interval=0.5)
        except Timeout:
            return None
        return self.returncode

    def partition(self) -> None:
        """Cut this container off the session network (its process keeps running; every
        connection to and from it goes silent, as a pulled cable would)."""
        self.lab.network.disconnect(self.container, force=True)

    def heal(self) -> None:
        """Attach it again at the same address (and so the same MAC)."""
        self.lab.connect(self.container, self.address)

    def log_text(self) -> str:
        if self.container is None:
            return ""
        try:
            return self.container.logs().decode(errors="replace")
        except Exception as exc:  # noqa: BLE001
            return f"(no logs of container {self.name}: {exc})"

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class ContainerStoreServer:
    """A metadata store container as the session's ``mc_etcd`` server looks to a test that
    stops it (the store-outage suites): ``stop`` ends the store's process (the container and its
    address stay, so clients are refused at once), ``start`` replaces it at the same address
    with the same data directory and waits until it is healthy."""

    owned = True

    def __init__(self, process: ContainerProcess, endpoints: list[str]):
        self.process = process
        self.endpoints = endpoints

    def stop(self) -> None:
        self.process.stop()

    def start(self) -> None:
        self.process.start()

    def alive(self) -> bool:
        return self.process.alive()


class DockerLab:
    """The session's containers on its own network (an internal /24 of 198.18.0.0/15,
    ``containers.run_networks``), each at a fixed address by name; ``close`` removes them all."""

    def __init__(self, client: Any, image: str, session: str, workdir: Path,
                 etcd_image: str | None = None, labels: Mapping[str, str] | None = None):
        self.client = client
        self.image = image
        self.session = session
        self.workdir = Path(workdir)
        self.etcd_image = etcd_image or image
        self.labels = dict(labels or {SESSION_LABEL: session})
        self.driver_dir = str(DRIVER.parent)
        self.mounts: dict[str, dict[str, str]] = {
            self.driver_dir: {"bind": DRIVER_DIR_IN_CONTAINER, "mode": "ro"}}
        self.share(self.workdir)
        self._network: Any = None
        self._hosts: Iterator[Any] | None = None
        self._reserved: dict[str, str] = {}
        self._serial = itertools.count(1)
        self.containers: list[Any] = []
        self._etcd: ContainerProcess | None = None

    def share(self, directory: Path) -> None:
        """Bind-mount ``directory`` (a target's work directory: drivers' ready files) at the
        same path into every container started from now on."""
        path = str(directory)
        self.mounts.setdefault(path, {"bind": path, "mode": "rw"})

    def container_name(self, name: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"mc-{self.session}-{name}")[:120]

    @property
    def network(self) -> Any:
        if self._network is None:
            self._network = create_network(self.client, f"mc-{self.session}", self.labels)
            self._hosts = subnet_of(self._network).hosts()
            next(self._hosts)  # .1: this host's end of the bridge
        return self._network

    @property
    def gateway(self) -> str:
        """This host's address on the session network."""
        return str(subnet_of(self.network).network_address + 1)

    def _next_address(self) -> str:
        _ = self.network
        try:
            return str(next(self._hosts))
        except StopIteration:
            raise TargetError(f"the session network {self.network.name} has no address left "
                              f"(a /{subnet_of(self.network).prefixlen})") from None

    def address_for(self, name: str) -> str:
        """The address the next process called ``name`` will have (others are told it before
        it starts: a store client's ``--hostname``)."""
        if name not in self._reserved:
            self._reserved[name] = self._next_address()
        return self._reserved[name]

    def claim(self, name: str) -> tuple[str, str]:
        """(a container name no other process of the session has, its address): the one
        ``address_for`` promised, else a new one. A process keeps both across its restarts;
        a later process of the same ``name`` (another test's engine ``seg-a``) gets new ones,
        so it never meets a killed predecessor's container or address."""
        address = self._reserved.pop(name, None) or self._next_address()
        return f"{name}-{next(self._serial)}", address

    def run(self, name: str, argv: Sequence[str], env: Mapping[str, str], address: str,
            image: str | None = None) -> Any:
        volumes = dict(self.mounts)
        options = {"volumes": volumes, **fabric_run_options(env, volumes)}
        container = self.client.containers.run(
            image or self.image, list(argv), detach=True, name=self.container_name(name),
            hostname=self.container_name(name)[:63], network=self.network.name,
            networking_config={self.network.name: self.endpoint(address)},
            environment=dict(env), labels=self.labels, **options,
        )
        self.containers.append(container)
        return container

    @staticmethod
    def endpoint(address: str) -> dict[str, Any]:
        """The container's settings on the session network: its address and the MAC fixed by
        it. A raw API dict: the SDK's ``create_endpoint_config`` refuses ``mac_address`` below
        API 1.44, and a container-level MAC is ignored by Podman once a network is named."""
        return {"IPAMConfig": {"IPv4Address": address}, "MacAddress": mac_for(address)}

    def connect(self, container: Any, address: str) -> None:
        api = self.client.api
        api._result(api._post_json(api._url("/networks/{0}/connect", self.network.id), data={
            "Container": container.id, "EndpointConfig": self.endpoint(address)}))

    def remove(self, container: Any) -> None:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass
        if container in self.containers:
            self.containers.remove(container)

    def etcd(self, ready_timeout: float = 60.0) -> tuple[str, str]:
        """Start (once) an etcd container; (endpoint on the network, endpoint on this host:
        the same address, which this host reaches directly)."""
        if self._etcd is None:
            # its data in the (bind-mounted) work directory: a stopped etcd started again (the
            # store-outage tests, ``etcd_server``) is a new container that keeps the keys
            argv = ["etcd", "--name", "mc-etcd", "--data-dir", str(self.workdir / "etcd-data"),
                    "--listen-client-urls", f"http://{ADDRESS}:{ETCD_PORT}",
                    "--advertise-client-urls", f"http://{ADDRESS}:{ETCD_PORT}",
                    "--listen-peer-urls", f"http://{ADDRESS}:2380"]

            def healthy(p: ContainerProcess) -> bool:
                return etcd_healthy(f"{p.address}:{ETCD_PORT}")

            self._etcd = ContainerProcess(self, "etcd", argv, {}, healthy, ready_timeout,
                                          image=self.etcd_image).start()
        endpoint = f"{self._etcd.address}:{ETCD_PORT}"
        return endpoint, endpoint

    def etcd_server(self, endpoints: Sequence[str]) -> ContainerStoreServer:
        """The etcd container as a store server a test may stop and start again."""
        self.etcd()
        return ContainerStoreServer(self._etcd, list(endpoints))

    def close(self) -> list[str]:
        """Remove every container and the network; returns what could not be removed."""
        problems = []
        for container in list(self.containers):
            try:
                container.remove(force=True)
            except Exception as exc:  # noqa: BLE001 (keep removing the rest)
                problems.append(f"container {getattr(container, 'name', container)}: {exc}")
            self.containers.remove(container)
        if self._network is not None:
            try:
                self._network.remove()
            except Exception as exc:  # noqa: BLE001
                problems.append(f"network {self._network.name}: {exc}")
            self._network = None
        return problems


class ContainerLauncher:
    """Components as containers of the target image on the session network, each listening on
    its own address there."""

    bind_host = ADDRESS
    master_rpc = {"rpc_address": ADDRESS}
    control_port = CONTROL_PORT

    def __init__(self, lab: DockerLab, version: str, install: ImageEnvironment | None = None,
                 image: str | None = None):
        self.lab = lab
        self.version = version
        self.image = image
        self.install = install or ImageEnvironment({})
        """What an emulated RDMA cluster asks of ``launcher.install.env`` (the image's own)."""
        self._ports = itertools.count(20000)
        self.master_flags = assumed_master_flags(version)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: ReadyProbe | None, ready_timeout: float,
              publish: Sequence[int] = ()) -> ContainerProcess:
        return ContainerProcess(self.lab, name, argv, env, ready, ready_timeout, publish,
                                self.image).start()

    def host_port(self, process: Any, port: int) -> int:
        return process.published(port)

    def host_address(self, process: Any) -> str:
        return process.address

    def environment(self, extra: Mapping[str, str]) -> Mapping[str, str]:
        return dict(extra)  # a container starts from the image's environment and ``extra``

    def driver_argv(self, *args: str) -> list[str]:
        return ["python3", f"{DRIVER_DIR_IN_CONTAINER}/{DRIVER.name}", *args]

    def master_binary(self) -> str:
        return "mooncake_master"

    def host_name(self, name: str) -> str:
        return self.lab.address_for(name)

    def port(self) -> int:
        return next(self._ports)

    def release(self, port: int) -> None:
        pass


def assumed_master_flags(image: str) -> MasterFlags:
    """The master flags of ``image``: not probed (asking the image's ``mooncake_master --help``
    needs a Docker engine, which the probes do not start), so those recorded for 0.3.13.post1,
    named as such in every message about a missing flag."""
    record = recorded(ASSUMED_RELEASE) or {}
    flags = record.get("master_flags")
    return MasterFlags(flags if isinstance(flags, dict) else {}, image,
                       f"assumed: the flags recorded for {ASSUMED_RELEASE} in "
                       f"pytest_mooncake/releases/probed/; the image itself is not probed")


# ------------------------------------------------------------------------------- placement


class DockerPlacement(ProcessPlacement):
    """The family's components as containers of ``image``; etcd as a container on the same
    session network. The Docker engine is pinged (bounded) at the first capability question."""

    kind = "docker"
    engine_ready_timeout = 60.0
    etcd_routing = ("every mooncake_master container gets the lab's etcd endpoints, and a host "
                    "proxy address would not be reachable from inside the session network")
    reaches_container_masters = True
    """Its store clients are containers on the run's shared network (``container_run``), where
    the masters of every docker target of the run listen."""

    def __init__(self, image: str, client_factory: Callable[[float], Any] | None = None,
                 ping_timeout: float = 3.0):
        self.image = image
        self.variant = image
        self.client_factory = client_factory
        self.container_engine: ContainerEngine | None = None
        self._run: ContainerRun | None = None
        """The process's shared engine, network and etcd (``container_run``)."""
        self.ping_timeout = ping_timeout
        self.client: Any = None
        self.facts: dict[str, Any] = {}
        self._lacks: dict[Capability, str] = {}
        self._http_servers = itertools.count(1)
        self._relays: dict[str, TcpRelay] = {}
        """address relayed -> its relay (loopback -> session network, and back)"""
        self.release_placement: Any = None
        """A ``LocalPlacement`` of the image's release: its probed facts stand for the image's."""
        self._caps: frozenset[Capability] | None = None
        self._no_engine: str | None = None
        self._lab: DockerLab | None = None
        self.image_env = ImageEnvironment({})
        self.verbs_mode = "auto"

    def probe(self) -> str | None:
        """Find the container engine once (``containers.session_engine``: DOCKER_HOST, a
        Docker, or a Podman this run starts); None when one answers, else the reason. With a
        ``client_factory`` (unit tests' fake SDK) that client is pinged instead."""
        if self._caps is not None:
            return self._no_engine
        if self.client_factory is None:
            self._open_engine()
        else:
            self._open_client()
        if self._no_engine is None:
            self._inspect_image()
            self._caps = self._release_capabilities() or SUPPORTED
        else:
            self.client = None
            self._caps = frozenset()
        return self._no_engine

    def _open_engine(self) -> None:
        try:
            self._run = container_run.acquire(API_TIMEOUT)
        except EngineUnavailable as exc:
            self._no_engine = str(exc)
            return
        engine = self._run.engine
        self.container_engine, self.client = engine, engine.client
        self.facts["engine"] = engine.how

    def _open_client(self) -> None:
        where = f"DOCKER_HOST={docker_host()}"
        try:
            self.client = within(self.ping_timeout + 1, self.client_factory, self.ping_timeout,
                                 what="docker.from_env")
            within(self.ping_timeout + 1, self.client.ping, what="docker ping")
            # The probe's client times out after ping_timeout; pulls and container waits need longer.
            self.client = self.client_factory(API_TIMEOUT)
        except ImportError as exc:
            self._no_engine = f"the docker SDK is not installed ({exc}): pip install docker"
        except Exception as exc:  # noqa: BLE001 (any failure means: no engine to use)
            self._no_engine = f"no Docker engine at {where}: {type(exc).__name__}: {exc}"
        else:
            self.facts["engine"] = where

    def _inspect_image(self) -> None:
        try:
            image = within(self.ping_timeout + 1, self.client.images.get, self.image,
                           what="docker image inspect")
        except Exception as exc:  # noqa: BLE001 (pulled at first use)
            self.facts["image"] = f"not present locally ({type(exc).__name__}); pulled on first use"
            return
        labels = getattr(image, "labels", None) or {}
        self.image_env = ImageEnvironment.of(image)
        self.facts["image"] = getattr(image, "short_id", None) or getattr(image, "id", "?")
        self.facts["release"] = labels.get(RELEASE_LABEL)
        self.facts["image_version"] = labels.get("org.opencontainers.image.version") or \
            labels.get("version")

    def _release_capabilities(self) -> frozenset[Capability] | None:
        """For an image built here (``images.release_image``, labelled with its release): the
        capabilities the release's probed facts give (the same wheel, probed in its cached
        environment on this host, ``LocalPlacement``), less what containers do not offer yet
        (``CONTAINER_LACKS``). None for an operator's image: only ``SUPPORTED``, assumed."""
        release = self.facts.get("release")
        if not release:
            return None
        from pytest_mooncake.targets.mooncake.install import locate_release  # noqa: PLC0415
        from pytest_mooncake.targets.mooncake.placements.this_host import (  # noqa: PLC0415
            LocalPlacement,
        )

        self.release_placement = LocalPlacement(locate_release(release))
        self.release_placement.use_verbs(self.verbs_mode)
        self.facts["verbs"] = self.release_placement.verbs.mode
        caps = self.release_placement.capabilities
        self._lacks = dict(self.release_placement._lacks)
        self.cache_knobs = self.release_placement.cache_knobs
        for cap, why in CONTAINER_LACKS.items():
            if cap in caps:
                self._lacks[cap] = why
        self._lacks[Capability.VERSION_SKEW] = (
            f"the docker target runs one image ({self.image}); skew pairs come from --mc-matrix")
        return frozenset(c for c in caps if c not in self._lacks)

    @property
    def capabilities(self) -> frozenset[Capability]:
        self.probe()
        return self._caps or frozenset()

    def use_verbs(self, mode: str) -> None:
        """``--mc-verbs``, given before any capability is asked: the release's probe judges
        RDMA control on that layer (emulated devices work in containers, ``container_fabric``)."""
        self.verbs_mode = mode

    def rdma(self, options: dict[str, Any]) -> Any:
        """Engine containers on emulated RDMA devices, controlled through their verbs sockets
        as the release's engines on this host are (``emulated_rdma.MooncakeRdma``)."""
        from pytest_mooncake.targets.mooncake.emulated_rdma import MooncakeRdma  # noqa: PLC0415

        self.probe()
        if self.release_placement is None:
            raise TargetLacks(Capability.RDMA_CONTROL, self.lack_reason(Capability.RDMA_CONTROL))
        return MooncakeRdma(self, self.release_placement.verbs, self._lacks,
                            int(options.get("seed") or 0),
                            self.release_placement.facts.get("probe", {}).get("package_dir"),
                            schedules=options.get("schedules"), strategy=options.get("strategy"),
                            replay=options.get("replay"))

    def lack_reason(self, capability: Capability) -> str:
        reason = self.probe()
        if reason:
            return reason
        if capability in self._lacks:
            return self._lacks[capability]
        return (f"the docker target runs {self.image} through its driver and mooncake_master "
                f"only; it has no means for {capability.value}")

    @property
    def version(self) -> str:
        extra = self.facts.get("image_version") or self.facts.get("image")
        return f"{self.image} ({extra})" if extra else self.image

    def describe(self) -> dict[str, Any]:
        return {"facts": dict(self.facts)}

    def lab(self) -> DockerLab:
        """The session's containers and network, made at first use (pulling the image)."""
        reason = self.probe()
        if reason:
            raise TargetLacks(Capability.ENGINE, reason)
        if self._lab is None:
            if self.ctx is None:
                raise TargetError("the docker target was not opened (no session context)")
            if "not present" in str(self.facts.get("image", "")):
                if self.image.startswith("localhost/"):
                    raise TargetLacks(Capability.ENGINE, (
                        f"image {self.image} is not in the engine ({self.facts.get('engine')}); "
                        f"build it: python -m pytest_mooncake.images build "
                        f"{self.image.rpartition(':')[2]}"))
                self.client.images.pull(self.image)
            if self._run is not None:
                self._lab = self._run.lab_for(self.workdir, self._new_lab)
            else:
                self._lab = self._new_lab()
        return self._lab

    def _new_lab(self) -> DockerLab:
        if self.container_engine is not None:
            session, labels = self.container_engine.session, self.container_engine.labels
        else:
            session = f"{os.getpid()}-{self.ctx.seed % 100000}"
            labels = session_labels(session)
        return DockerLab(self.client, self.image, session, self.workdir,
                         os.environ.get("MC_DOCKER_ETCD_IMAGE"), labels)

    def close(self) -> None:
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        if self.release_placement is not None and self.release_placement.ctx is not None:
            self.release_placement.close()  # what store_on_this_host started
        if self._run is not None:  # the last target of the process removes the lab
            container_run.release(self._run)
            self._run, self._lab, self.container_engine = None, None, None
        if self._lab is not None:
            self._lab.close()
            self._lab = None

    def launcher(self) -> ContainerLauncher:
        launcher = ContainerLauncher(self.lab(), self.version, self.image_env, self.image)
        if self.release_placement is not None:
            launcher.master_flags = MasterFlags.of(self.release_placement.release_facts())
        return launcher

    def master_flags(self) -> MasterFlags:
        return assumed_master_flags(self.version)

    def launcher_class(self) -> type[ContainerLauncher]:
        return ContainerLauncher

    def master_etcd(self) -> list[str]:
        inside, _ = self.lab().etcd()
        return [inside]

    def engine(self, segment: str, metadata: MetadataHandle, options: Mapping[str, Any],
               lacks: Mapping[Capability, str]) -> Any:
        """An engine container; a metadata address on this host's loopback (the fault proxy's)
        is reached through a ``TcpRelay`` on the session network."""
        return super().engine(segment, self.reachable(metadata), options, lacks)

    def reachable(self, metadata: MetadataHandle) -> MetadataHandle:
        used = getattr(metadata, "host_port", None) or (getattr(metadata, "endpoints", None)
                                                         or [""])[0]
        host, _, port = used.rpartition(":")
        if not host.startswith("127.") or len(getattr(metadata, "endpoints", [used])) != 1:
            return metadata
        return metadata.through(self.relay(used, self.lab().gateway))

    def relay(self, address: str, listen_host: str) -> str:
        """Where ``listen_host`` reaches ``address`` (a relay made once per address, shared by
        the process's docker targets)."""
        if self._run is not None:
            return self._run.relay(address, listen_host)
        if address not in self._relays:
            host, _, port = address.rpartition(":")
            self._relays[address] = TcpRelay(listen_host, (host, int(port)))
        return self._relays[address].address

    def etcd_on_host(self) -> str:
        """The session's etcd container as this host's processes address it: a relay on
        127.0.0.1 (a fault proxy's upstream must be loopback)."""
        inside, _ = self.lab().etcd()
        return self.relay(inside, "127.0.0.1")

    def metadata_store(self, kind: str) -> MetadataHandle:
        if kind == "http":
            return self.start_http_metadata()
        if kind in ("redis", "http:reference"):
            return self.store_on_this_host(kind)
        inside, _ = self.lab().etcd()
        return EtcdMetadata([inside], origin=[self.etcd_on_host()])

    def store_on_this_host(self, kind: str) -> MetadataHandle:
        """A store the release's own placement serves on this host's loopback, reached by the
        containers through a relay on the bridge (``engine``): the session Redis, once the
        image's wheel showed it takes ``redis://`` (n/a with the wheel's own answer, as for the
        release on this host), or the reference engine's HTTP metadata server."""
        host = self.release_placement
        if host is None:
            capability = Capability.METADATA_REDIS if kind == "redis" else Capability.METADATA_HTTP
            raise TargetLacks(capability, self.lack_reason(capability))
        if host.ctx is None:
            host.open(self.ctx)
        return host.redis_metadata() if kind == "redis" else host.start_reference_http_metadata()

    def start_http_metadata(self) -> HttpMetadata:
        """The wheel's own HTTP metadata server in a container of the image, on its address."""
        name = f"http-metadata-{next(self._http_servers)}"
        lab = self.lab()
        proc = ContainerProcess(
            lab, name, ["python3", "-m", "mooncake.http_metadata_server", "--host", ADDRESS,
                        "--port", str(HTTP_METADATA_PORT)], {},
            lambda p: port_open(HTTP_METADATA_PORT, p.address)(p), 30.0).start()
        inside = f"{proc.address}:{HTTP_METADATA_PORT}"
        handle = HttpMetadata(inside, process=proc, origin=self.relay(inside, "127.0.0.1"))
        return handle


class DockerTarget(MooncakeFamilyTarget):
    """``--mc-target=docker:IMAGE``: the family adapter with a ``DockerPlacement``."""

    kind = "docker"
    binds_any_host = True
    """Beside another target's components (a skew role) its containers listen on their own
    session-network addresses, which this host and the run's other containers reach."""

    def __init__(self, image: str, client_factory: Callable[[float], Any] | None = None,
                 ping_timeout: float = 3.0):
        super().__init__(DockerPlacement(image, client_factory, ping_timeout))

    @classmethod
    def from_spec(cls, variant: str | None) -> DockerTarget:
        try:
            return cls(parse_image(variant))
        except ValueError as exc:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(str(exc)) from None

    @property
    def image(self) -> str:
        return self.placement.image

    def probe(self) -> str | None:
        return self.placement.probe()

    @property
    def client(self) -> Any:
        return self.placement.client

    def metadata_server(self, metadata: MetadataHandle) -> ContainerStoreServer | None:
        """The server behind ``metadata`` when it is this target's etcd container (a test that
        stops the store stops that container's etcd, not the session's on this host)."""
        if getattr(metadata, "kind", None) != "etcd":
            return None
        if metadata.address != self.placement.etcd_on_host():
            return None
        return self.placement.lab().etcd_server([metadata.address])

    def peer_etcd(self) -> list[str] | None:
        """The etcd components a skew role starts on this host (the reference engine of a
        mixed pair) must share with the containers: the session's etcd container, through its
        loopback relay, the same address ``metadata_store("etcd")`` names."""
        return [self.placement.etcd_on_host()]

    def peer_host(self, who: str) -> str:
        """Where a skew role's components on this host listen so containers reach them: this
        host's end of the session network (its ``.1``); loopback is not reachable from a
        container's network namespace."""
        return self.placement.lab().gateway
