"""Emulated RDMA devices: their description, and the sysfs-shaped tree a run directory holds.

The emulated libibverbs reads this tree the way rdma-core reads sysfs, and serves it to the
process under test in place of ``/sys/class/infiniband`` and ``/dev/infiniband`` (see
``csrc/sysfs.c``): node GUID, ports with state, link layer, LID and GID table (with GID types
and the network device of each GID), the PCI function the device hangs off (its bus id is the
basename of ``/sys/class/infiniband/<dev>/../..``) and that function's NUMA node.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

MAX_DEVICES = 16  # EMU_MAX_DEVS in csrc/emu.h
MAX_PORTS = 2  # EMU_MAX_PORTS
MAX_GIDS = 16  # EMU_MAX_GIDS
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
LINK_LAYERS = {"eth": "Ethernet", "ethernet": "Ethernet", "ib": "InfiniBand",
               "infiniband": "InfiniBand"}
PORT_STATES = {"active": "4: ACTIVE", "down": "1: DOWN"}
OPTION_HELP = ("numa=N, link=eth|ib, state=active|down, ports=1|2, "
               "gid=<IPv6-form GID>[+<GID>...] (RoCE v2 entries of port 1)")


class DeviceSpecError(ValueError):
    """A device description could not be understood; the message names the part and the fix."""


@dataclass(frozen=True)
class DeviceSpec:
    """One emulated HCA. ``gids`` replaces the default GID table of port 1 (RoCE v2 entries)."""

    name: str
    numa_node: int = 0
    link_layer: str = "Ethernet"
    port_state: str = "active"
    ports: int = 1
    gids: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """``mlx5_1`` or ``mlx5_1:numa=1:link=ib:state=down:ports=2:gid=::ffff:10.0.0.1``."""
        name, _, rest = text.strip().partition(":")
        options: dict[str, str] = {}
        # a gid value holds colons itself: everything after "gid=" belongs to it
        rest, _, gid_value = rest.partition("gid=")
        for part in filter(None, rest.split(":")):
            key, eq, value = part.partition("=")
            if not eq:
                raise DeviceSpecError(f"device {text!r}: option {part!r} is not key=value "
                                      f"(options: {OPTION_HELP})")
            options[key.strip().lower()] = value.strip()
        if gid_value:
            options["gid"] = gid_value
        spec = cls(name=name.strip())
        try:
            if "numa" in options:
                spec = replace(spec, numa_node=int(options.pop("numa")))
            if "link" in options:
                spec = replace(spec, link_layer=LINK_LAYERS[options.pop("link").lower()])
            if "state" in options:
                state = options.pop("state").lower()
                if state not in PORT_STATES:
                    raise KeyError(state)
                spec = replace(spec, port_state=state)
            if "ports" in options:
                spec = replace(spec, ports=int(options.pop("ports")))
            if "gid" in options:
                spec = replace(spec, gids=tuple(options.pop("gid").split("+")))
        except (KeyError, ValueError) as exc:
            raise DeviceSpecError(f"device {text!r}: bad value {exc} (options: {OPTION_HELP})"
                                  ) from None
        if options:
            raise DeviceSpecError(f"device {text!r}: unknown option(s) {', '.join(options)} "
                                  f"(options: {OPTION_HELP})")
        spec.check()
        return spec

    def check(self) -> None:
        if not NAME.match(self.name):
            raise DeviceSpecError(f"device name {self.name!r}: use letters, digits and _.- "
                                  f"(like mlx5_0), starting with a letter")
        if not 1 <= self.ports <= MAX_PORTS:
            raise DeviceSpecError(f"device {self.name}: ports={self.ports}, at most {MAX_PORTS}")
        if self.numa_node < -1:
            raise DeviceSpecError(f"device {self.name}: numa={self.numa_node}; -1 means none")
        if self.link_layer not in LINK_LAYERS.values() or self.port_state not in PORT_STATES:
            raise DeviceSpecError(f"device {self.name}: link layer {self.link_layer!r} / port "
                                  f"state {self.port_state!r} (options: {OPTION_HELP})")
        if len(self.gids) > MAX_GIDS:
            raise DeviceSpecError(f"device {self.name}: {len(self.gids)} GIDs, at most {MAX_GIDS}")
        for gid in self.gids:
            try:
                ipaddress.IPv6Address(gid)
            except ValueError:
                raise DeviceSpecError(f"device {self.name}: GID {gid!r} is not an IPv6-form "
                                      f"address (e.g. ::ffff:127.0.1.1)") from None


def parse_devices(text: str | Iterable[str]) -> list[DeviceSpec]:
    """``"mlx5_0,mlx5_1:numa=1"`` (or a list of such items) into device specs, checked."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs = [DeviceSpec.parse(item) for item in items if item.strip()]
    if not specs:
        raise DeviceSpecError("no devices given: name at least one, e.g. --devices mlx5_0")
    if len(specs) > MAX_DEVICES:
        raise DeviceSpecError(f"{len(specs)} devices; the emulator serves at most {MAX_DEVICES}")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DeviceSpecError(f"device name(s) given twice: {', '.join(dupes)}")
    return specs


def sysfs_gid(text: str) -> str:
    """A GID as sysfs prints it: eight groups of four hex digits."""
    return ":".join(f"{g:04x}" for g in _groups(ipaddress.IPv6Address(text)))


def _groups(addr: ipaddress.IPv6Address) -> list[int]:
    raw = addr.packed
    return [raw[i] << 8 | raw[i + 1] for i in range(0, 16, 2)]


@dataclass(frozen=True)
class GidEntry:
    gid: str  # IPv6 text
    kind: str  # "RoCE v2" or "IB/RoCE v1"
    ndev: str | None  # network device the GID belongs to (Ethernet only)


def node_guid(index: int) -> str:
    value = 0x0200_00FF_FE00_0000 + index + 1
    return ":".join(f"{(value >> s) & 0xFFFF:04x}" for s in (48, 32, 16, 0))


def pci_bus_id(index: int) -> str:
    return f"0000:{0x18 + index:02x}:00.0"


def gid_table(spec: DeviceSpec, index: int, port: int) -> list[GidEntry]:
    """The GID table of one port. Ethernet ports get what a RoCE NIC shows: link-local v1 and v2
    entries, then an IPv4-mapped address (127.0.<device>.<port>, unique per device) as v1 and v2,
    all on ``lo``. InfiniBand ports get the link-local GID only."""
    guid = node_guid(index).replace(":", "")
    link_local = str(ipaddress.IPv6Address(f"fe80::{guid[0:4]}:{guid[4:8]}:{guid[8:12]}:"
                                           f"{guid[12:16]}"))
    if spec.link_layer == "InfiniBand":
        return [GidEntry(link_local, "IB/RoCE v1", None)]
    if spec.gids and port == 1:
        return [GidEntry(g, "RoCE v2", "lo") for g in spec.gids]
    mapped = f"::ffff:127.0.{index + 1}.{port}"
    return [GidEntry(link_local, "IB/RoCE v1", "lo"), GidEntry(link_local, "RoCE v2", "lo"),
            GidEntry(mapped, "IB/RoCE v1", "lo"), GidEntry(mapped, "RoCE v2", "lo")]


def write_tree(root: Path, devices: Sequence[DeviceSpec]) -> None:
    """Write ``root/sys/...`` and ``root/dev/infiniband/...`` for ``devices`` (a fresh ``root``)."""
    sys_dir = root / "sys"
    for index, spec in enumerate(devices):
        pci = sys_dir / "devices" / "pci0000:00" / pci_bus_id(index)
        ib = pci / "infiniband" / spec.name
        verbs = pci / "infiniband_verbs" / f"uverbs{index}"
        _write(pci / "numa_node", f"{spec.numa_node}\n")
        _write(ib / "node_guid", node_guid(index) + "\n")
        _write(ib / "node_type", "1: CA\n")
        _write(ib / "fw_ver", "1.0 (mc-verbs)\n")
        _write(ib / "hca_type", "emulated\n")
        (ib / "device").symlink_to(Path("..") / "..")
        for port in range(1, spec.ports + 1):
            _write_port(ib / "ports" / str(port), spec, index, port)
        _write(verbs / "ibdev", spec.name + "\n")
        _write(verbs / "dev", f"231:{192 + index}\n")
        _symlink(sys_dir / "class" / "infiniband" / spec.name,
                 Path("..") / ".." / ib.relative_to(sys_dir))
        _symlink(sys_dir / "class" / "infiniband_verbs" / f"uverbs{index}",
                 Path("..") / ".." / verbs.relative_to(sys_dir))
        _symlink(root / "dev" / "infiniband" / f"uverbs{index}", Path("/dev/null"))


def _write_port(port_dir: Path, spec: DeviceSpec, index: int, port: int) -> None:
    active = spec.port_state == "active"
    _write(port_dir / "state", PORT_STATES[spec.port_state] + "\n")
    _write(port_dir / "phys_state", ("5: LinkUp" if active else "3: Disabled") + "\n")
    _write(port_dir / "link_layer", spec.link_layer + "\n")
    lid = 0 if spec.link_layer == "Ethernet" else 2 * index + port
    _write(port_dir / "lid", f"0x{lid:x}\n")
    _write(port_dir / "rate", "100 Gb/sec (4X EDR)\n")
    for i, entry in enumerate(gid_table(spec, index, port)):
        _write(port_dir / "gids" / str(i), sysfs_gid(entry.gid) + "\n")
        _write(port_dir / "gid_attrs" / "types" / str(i), entry.kind + "\n")
        if entry.ndev:
            _write(port_dir / "gid_attrs" / "ndevs" / str(i), entry.ndev + "\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _symlink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
