"""Where a Podman this package starts keeps its images, state and settings, and those settings.

One directory (``MC_PODMAN_DIR``, default ``<plugin cache>/podman``) holds the image store
(``graph/``: images persist between runs, so a built Mooncake image is built once), the runtime
state (``run/``), the network definitions (``networks/``: apart from the host's
``/etc/containers/networks``) and the two configuration files Podman reads through
``CONTAINERS_CONF`` / ``CONTAINERS_STORAGE_CONF``. The settings are the ones measured on this
kind of host: ``runc`` (crun refuses hybrid cgroups), no default ulimits (raising RLIMIT_NOFILE
is refused), netavark, and a default subnet in 198.18.0.0/15 so nothing ever lands in Podman's
10.88.0.0/16 (the run makes its own networks; the default one is never used).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pytest_mooncake.runtime.native import cache_dir

DEFAULT_SUBNET = "198.19.255.0/24"
"""(inside the topmost /20, which run networks therefore never take)"""
"""Podman's default network, set so it is in the run's range; never attached to anything."""

CONTAINERS_CONF = """\
# written by pytest_mooncake.container_engine.podman_home; regenerated when it differs
[containers]
default_ulimits = []

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
network_config_dir = "{networks}"
default_subnet = "{subnet}"
"""

STORAGE_CONF = """\
# written by pytest_mooncake.container_engine.podman_home; regenerated when it differs
[storage]
driver = "overlay"
graphroot = "{graph}"
runroot = "{run}"
"""


def podman_dir() -> Path:
    explicit = os.environ.get("MC_PODMAN_DIR")
    return Path(explicit) if explicit else cache_dir("podman")


class PodmanHome:
    """The directory a Podman of ours uses, with its configuration written."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else podman_dir()

    @property
    def containers_conf(self) -> Path:
        return self.root / "containers.conf"

    @property
    def storage_conf(self) -> Path:
        return self.root / "storage.conf"

    def prepare(self) -> PodmanHome:
        for sub in ("graph", "run", "networks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        _write_if_changed(self.containers_conf, CONTAINERS_CONF.format(
            networks=self.root / "networks", subnet=DEFAULT_SUBNET))
        _write_if_changed(self.storage_conf, STORAGE_CONF.format(
            graph=self.root / "graph", run=self.root / "run"))
        return self

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a ``podman`` command of ours runs with."""
        env = dict(os.environ if base is None else base)
        env["CONTAINERS_CONF"] = str(self.containers_conf)
        env["CONTAINERS_STORAGE_CONF"] = str(self.storage_conf)
        return env


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(path.name + f".{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)


def missing_tools() -> str | None:
    """Why Podman cannot be started here (a missing program or not root), or None."""
    lacking = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if lacking:
        return (f"{' and '.join(lacking)} not installed (scripts/setup.sh installs podman and runc "
                f"as root: apt-get install -y podman runc)")
    if os.geteuid() != 0:
        return "Podman is started only as root here (rootless Podman is not configured)"
    return None
