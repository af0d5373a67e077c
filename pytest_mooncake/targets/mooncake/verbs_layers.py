"""Which verbs layer a real build's RDMA transport runs on (``--mc-verbs``), as strategy objects.

- ``EmulatedVerbs``: the emulated ``libibverbs.so.1`` of ``pytest_mooncake.verbs``; each RDMA
  cluster a test builds gets its own fabric (run directory, devices, one control socket per
  process), so a test can hold, fail and release the build's completions. The default where
  this host has no RDMA device.
- ``HostVerbs``: the host's own RDMA devices and rdma-core's library; nothing can hold or fail
  a real NIC's completions (the interposer mode in the README is the design for that), so the
  RDMA suites are n/a with that reason.
- ``SimulatorVerbs``: ``sim`` and ``pyverbs:DEVICE`` name the reference engine's layers; a real
  build cannot run on them.

``verbs_layer(mode)`` turns the option into one of these; ``auto`` picks emulated or host by
looking at ``/sys/class/infiniband``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pytest_mooncake.verbs import DeviceSpec, EmulatedFabric, parse_devices

DEFAULT_DEVICES = "mlx5_0,mlx5_1,mlx5_2,mlx5_3"
"""What an emulated fabric offers when ``--mc-verbs=emulated`` names no devices: enough NICs
for every cluster the RDMA suites build (a node uses the ones it names)."""
SYSFS_DEVICES = Path("/sys/class/infiniband")
INTERPOSER = ("real completions cannot be held or failed on a host NIC without the interposer "
              "(README, 'Interposer mode (design; not built)')")


class VerbsLayer(Protocol):
    mode: str
    """The ``--mc-verbs`` value it came from, resolved (``emulated:...``, ``host``, ``sim``)."""

    def control_lacks(self, build: str) -> str | None:
        """Why ``build`` run on this layer cannot have its completions controlled (None: it can)."""
        ...

    def fabric(self, seed: int, devices: str | None = None) -> EmulatedFabric:
        """A fresh emulated fabric for one cluster (only the emulated layer has one)."""
        ...


@dataclass(frozen=True)
class EmulatedVerbs:
    devices: tuple[DeviceSpec, ...] = field(
        default_factory=lambda: tuple(parse_devices(DEFAULT_DEVICES)))

    @property
    def mode(self) -> str:
        return "emulated:" + ",".join(d.name for d in self.devices)

    def control_lacks(self, build: str) -> str | None:
        return None

    def fabric(self, seed: int, devices: str | None = None) -> EmulatedFabric:
        """A run directory under /tmp (control socket paths must stay short); the caller closes
        it."""
        return EmulatedFabric.create(parse_devices(devices) if devices else self.devices,
                                     seed=seed)


@dataclass(frozen=True)
class HostVerbs:
    mode: str = "host"

    def control_lacks(self, build: str) -> str | None:
        return (f"--mc-verbs=host: {build} runs its RDMA transport on this host's RDMA devices "
                f"through rdma-core; {INTERPOSER}")

    def fabric(self, seed: int, devices: str | None = None) -> EmulatedFabric:
        raise RuntimeError(self.control_lacks("the build"))


@dataclass(frozen=True)
class SimulatorVerbs:
    mode: str

    def control_lacks(self, build: str) -> str | None:
        return (f"--mc-verbs={self.mode} names a verbs layer of the reference engine; {build} "
                f"runs on verbs devices: use --mc-verbs=emulated (emulated devices whose "
                f"completions the test controls)")

    def fabric(self, seed: int, devices: str | None = None) -> EmulatedFabric:
        raise RuntimeError(self.control_lacks("the build"))


def host_has_rdma_devices(sysfs: Path = SYSFS_DEVICES) -> bool:
    try:
        return any(sysfs.iterdir())
    except OSError:
        return False


def verbs_layer(mode: str, host_devices: bool | None = None) -> VerbsLayer:
    """The layer ``--mc-verbs=mode`` asks of a real build. ``auto``: emulated devices where this
    host has none (``/sys/class/infiniband`` empty or absent), else the host's own."""
    mode = (mode or "auto").strip()
    if mode == "auto":
        has = host_has_rdma_devices() if host_devices is None else host_devices
        return HostVerbs() if has else EmulatedVerbs()
    if mode == "host":
        return HostVerbs()
    if mode == "emulated":
        return EmulatedVerbs()
    if mode.startswith("emulated:"):
        return EmulatedVerbs(tuple(parse_devices(mode.partition(":")[2])))
    return SimulatorVerbs(mode)
