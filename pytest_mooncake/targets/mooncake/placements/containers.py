"""The ``docker`` target: Mooncake from a container image, driven through the docker SDK.

``--mc-target=docker:IMAGE`` (e.g. ``docker:kvcacheai/mooncake:0.3.13``). The session gets a
user-defined bridge network; etcd runs as a container on it (image ``MC_DOCKER_ETCD_IMAGE``,
default below); engines, store clients and ``mooncake_master`` run as containers of IMAGE with
the same driver script as the ``mooncake`` target, mounted read-only. Only loopback ports of
this host are published (control sockets, admin ports, etcd). The session's work directory is
bind-mounted at the same path so drivers' ready files appear here, which needs a Docker engine
on this host (``DOCKER_HOST`` a local socket).

No Docker engine answering is not an error: the first capability question pings the engine
with a bounded timeout, and when that fails every capability is absent with
``no Docker engine at DOCKER_HOST=<value>: <error>``.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_mooncake.releases.record import recorded
from pytest_mooncake.runtime.deadlines import Timeout, wait_until, within
from pytest_mooncake.runtime.etcd_process import etcd_healthy
from pytest_mooncake.runtime.processes import ProcessStartError, ReadyProbe
from pytest_mooncake.targets.base import Capability, MetadataHandle, TargetError, TargetLacks
from pytest_mooncake.targets.mooncake.adapter import MooncakeFamilyTarget
from pytest_mooncake.targets.mooncake.install import DRIVER
from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata
from pytest_mooncake.targets.mooncake.placements.spawned import ProcessPlacement

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
DEFAULT_ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
DRIVER_DIR_IN_CONTAINER = "/mc-driver"
CONTROL_PORT = 7000
ASSUMED_RELEASE = "non-cuda-0.3.13.post1"
"""The release whose probed master flags stand for an image's (see ``assumed_master_flags``)."""
ETCD_PORT = 2379
SESSION_LABEL = "pytest-mooncake.session"
_IMAGE_RE = re.compile(
    r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?/)?"  # registry host[:port]/
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$")
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


def default_client_factory(timeout: float) -> Any:
    import docker  # noqa: PLC0415 (only this target needs the SDK)

    return docker.from_env(timeout=max(1, int(timeout)))


# ------------------------------------------------------------------------------- containers


class ContainerProcess:
    """A container that behaves like ``ManagedProcess`` for the engine and master handles:
    start (again), readiness, kill with a signal, stop, logs, published ports."""

    def __init__(self, lab: DockerLab, name: str, argv: Sequence[str],
                 env: Mapping[str, str] | None, ready: ReadyProbe | None,
                 ready_timeout: float, publish: Sequence[int] = ()):
        self.lab = lab
        self.name = name
        self.argv = [str(a) for a in argv]
        self.env = dict(env or {})
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.publish = list(publish)
        self.container: Any = None
        self.starts = 0

    def start(self) -> ContainerProcess:
        if self.container is not None:
            self.lab.remove(self.container)
        self.container = self.lab.run(self.name, self.argv, self.env, self.publish)
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

    def alive(self) -> bool:
        return self._state().get("Status") == "running"

    @property
    def pid(self) -> int | None:
        return self._state().get("Pid") or None

    @property
    def returncode(self) -> int | None:
        state = self._state()
        return None if not state or state.get("Status") == "running" else state.get("ExitCode")

    def published(self, port: int) -> int:
        """The 127.0.0.1 port of this host that docker published for ``port/tcp``."""
        self.container.reload()
        bindings = (self.container.ports or {}).get(f"{port}/tcp") or []
        if not bindings:
            raise TargetError(f"container {self.name} has no published binding for {port}/tcp")
        return int(bindings[0]["HostPort"])

    def send_signal(self, sig: int) -> None:
        if self.container is not None and self.alive():
            self.container.kill(signal=int(sig))

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        self.send_signal(sig)
        return self.wait_exit(10) if sig in (signal.SIGKILL, signal.SIGTERM) else None

    def terminate(self, timeout: float | None = None) -> int | None:
        if self.container is not None and self.alive():
            self.container.stop(timeout=int(timeout if timeout is not None else 5))
        return self.returncode

    stop = terminate

    def wait_exit(self, timeout: float) -> int | None:
        if self.container is None:
            return None
        try:
            return int(self.container.wait(timeout=timeout).get("StatusCode"))
        except Exception:  # noqa: BLE001 (timeout or removed)
            return self.returncode

    def log_text(self) -> str:
        if self.container is None:
            return ""
        try:
            return self.container.logs().decode(errors="replace")
        except Exception as exc:  # noqa: BLE001
            return f"(no logs of container {self.name}: {exc})"

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class DockerLab:
    """The session's containers and network; ``close`` removes every one of them."""

    def __init__(self, client: Any, image: str, session: str, workdir: Path,
                 etcd_image: str = DEFAULT_ETCD_IMAGE):
        self.client = client
        self.image = image
        self.session = session
        self.workdir = Path(workdir)
        self.etcd_image = etcd_image
        self.driver_dir = str(DRIVER.parent)
        self._network: Any = None
        self.containers: list[Any] = []
        self._etcd: ContainerProcess | None = None

    def container_name(self, name: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"mc-{self.session}-{name}")[:120]

    @property
    def network(self) -> Any:
        if self._network is None:
            self._network = self.client.networks.create(
                f"mc-{self.session}", driver="bridge", labels={SESSION_LABEL: self.session})
        return self._network

    def run(self, name: str, argv: Sequence[str], env: Mapping[str, str],
            publish: Sequence[int], image: str | None = None) -> Any:
        container = self.client.containers.run(
            image or self.image, list(argv), detach=True, name=self.container_name(name),
            hostname=self.container_name(name), network=self.network.name,
            environment=dict(env), labels={SESSION_LABEL: self.session},
            ports={f"{p}/tcp": ("127.0.0.1", None) for p in publish},
            volumes={str(self.workdir): {"bind": str(self.workdir), "mode": "rw"},
                     self.driver_dir: {"bind": DRIVER_DIR_IN_CONTAINER, "mode": "ro"}},
        )
        self.containers.append(container)
        return container

    def remove(self, container: Any) -> None:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass
        if container in self.containers:
            self.containers.remove(container)

    def etcd(self, ready_timeout: float = 60.0) -> tuple[str, str]:
        """Start (once) an etcd container; (endpoint on the network, endpoint on this host)."""
        name = "etcd"
        inside = f"{self.container_name(name)}:{ETCD_PORT}"
        if self._etcd is None:
            argv = ["etcd", "--name", "mc-etcd", "--data-dir", "/tmp/etcd-data",
                    "--listen-client-urls", f"http://0.0.0.0:{ETCD_PORT}",
                    "--advertise-client-urls", f"http://{inside}"]
            proc = ContainerProcess(self, name, argv, {}, None, ready_timeout, [ETCD_PORT])
            proc.container = self.run(name, argv, {}, [ETCD_PORT], image=self.etcd_image)

            def healthy(p: ContainerProcess) -> bool:
                return etcd_healthy(f"127.0.0.1:{p.published(ETCD_PORT)}")

            proc.ready = healthy
            proc._wait_ready()
            self._etcd = proc
        return inside, f"127.0.0.1:{self._etcd.published(ETCD_PORT)}"

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
    """Components as containers of the target image on the session network."""

    bind_host = "0.0.0.0"
    master_rpc = {"rpc_address": "0.0.0.0", "rpc_interface": "eth0"}
    control_port = CONTROL_PORT

    def __init__(self, lab: DockerLab, version: str):
        self.lab = lab
        self.version = version
        self._ports = itertools.count(20000)
        self.master_flags = assumed_master_flags(version)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: ReadyProbe | None, ready_timeout: float,
              publish: Sequence[int] = ()) -> ContainerProcess:
        return ContainerProcess(self.lab, name, argv, env, ready, ready_timeout, publish).start()

    def host_port(self, process: Any, port: int) -> int:
        return process.published(port)

    def environment(self, extra: Mapping[str, str]) -> Mapping[str, str]:
        return dict(extra)  # a container starts from the image's environment and ``extra``

    def driver_argv(self, *args: str) -> list[str]:
        return ["python3", f"{DRIVER_DIR_IN_CONTAINER}/{DRIVER.name}", *args]

    def master_binary(self) -> str:
        return "mooncake_master"

    def host_name(self, name: str) -> str:
        return self.lab.container_name(name)

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

    def __init__(self, image: str, client_factory: Callable[[float], Any] | None = None,
                 ping_timeout: float = 3.0):
        self.image = image
        self.variant = image
        self.client_factory = client_factory or default_client_factory
        self.ping_timeout = ping_timeout
        self.client: Any = None
        self.facts: dict[str, Any] = {}
        self._caps: frozenset[Capability] | None = None
        self._no_engine: str | None = None
        self._lab: DockerLab | None = None

    def probe(self) -> str | None:
        """Ping the Docker engine once (bounded); None when it answers, else the reason."""
        if self._caps is not None:
            return self._no_engine
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
        if self._no_engine is None:
            self.facts["engine"] = where
            self._inspect_image()
            self._caps = SUPPORTED
        else:
            self.client = None
            self._caps = frozenset()
        return self._no_engine

    def _inspect_image(self) -> None:
        try:
            image = within(self.ping_timeout + 1, self.client.images.get, self.image,
                           what="docker image inspect")
        except Exception as exc:  # noqa: BLE001 (pulled at first use)
            self.facts["image"] = f"not present locally ({type(exc).__name__}); pulled on first use"
            return
        labels = getattr(image, "labels", None) or {}
        self.facts["image"] = getattr(image, "short_id", None) or getattr(image, "id", "?")
        self.facts["image_version"] = labels.get("org.opencontainers.image.version") or \
            labels.get("version")

    @property
    def capabilities(self) -> frozenset[Capability]:
        self.probe()
        return self._caps or frozenset()

    def lack_reason(self, capability: Capability) -> str:
        reason = self.probe()
        if reason:
            return reason
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
                self.client.images.pull(self.image)
            session = f"{os.getpid()}-{self.ctx.seed % 100000}"
            self._lab = DockerLab(self.client, self.image, session, self.workdir,
                                  os.environ.get("MC_DOCKER_ETCD_IMAGE", DEFAULT_ETCD_IMAGE))
        return self._lab

    def close(self) -> None:
        if self._lab is not None:
            self._lab.close()
            self._lab = None

    def launcher(self) -> ContainerLauncher:
        return ContainerLauncher(self.lab(), self.version)

    def master_flags(self) -> MasterFlags:
        return assumed_master_flags(self.version)

    def launcher_class(self) -> type[ContainerLauncher]:
        return ContainerLauncher

    def master_etcd(self) -> list[str]:
        inside, _ = self.lab().etcd()
        return [inside]

    def metadata_store(self, kind: str) -> MetadataHandle:
        inside, on_host = self.lab().etcd()
        return EtcdMetadata([inside], origin=[on_host])


class DockerTarget(MooncakeFamilyTarget):
    """``--mc-target=docker:IMAGE``: the family adapter with a ``DockerPlacement``."""

    kind = "docker"

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
