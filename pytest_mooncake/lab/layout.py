"""Names, addresses and paths of one lab, all derived from its short name and its subnet.

Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmarking network
devices: never routed on the Internet and rarely configured on a host, so a lab cannot collide
with a real network the way a private range (10/8, 172.16/12, 192.168/16) might. Each lab takes
one /24 of it: ``.1`` is the lab host's end (the bridge), ``.2`` onwards the nodes. Everything a
lab makes carries its name, so a later ``lab down`` (or the fixture's next start) finds
leftovers of a run that was SIGKILLed:

  namespaces  mclab-<name>-n<i>       bridge  mclab-<name>     host ends of links  mcl<name>h<i>
  state       <root>/<name>/          (keys, sshd configs, run dirs, logs, state.json, cluster file)
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

RANGE = ipaddress.ip_network("198.18.0.0/15")
NAME = re.compile(r"^[a-z0-9]{1,6}$")
MAX_NODES = 32
PREFIX_NS = "mclab-"
PREFIX_LINK = "mcl"


def state_root() -> Path:
    """Where labs keep their files (``MC_LAB_DIR``, default /run/pytest-mooncake-lab)."""
    return Path(os.environ.get("MC_LAB_DIR", "/run/pytest-mooncake-lab"))


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"lab name {name!r}: 1-6 lowercase letters or digits (it goes into "
                         f"interface names, which Linux limits to 15 characters)")
    return name


@dataclass(frozen=True)
class NodeLayout:
    index: int            # 1-based
    name: str             # n1, n2, ...
    netns: str
    link: str             # host end of the veth pair (the node's end is eth0 in its namespace)
    address: str
    dir: Path             # the node's own files: sshd config, host key, run dir

    @property
    def run_dir(self) -> str:
        return str(self.dir / "run")


@dataclass(frozen=True)
class LabLayout:
    name: str
    subnet: ipaddress.IPv4Network
    nodes: int

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"--nodes {self.nodes}: a lab has 1 to {MAX_NODES} nodes")
        if self.subnet.prefixlen != 24 or not self.subnet.subnet_of(RANGE):  # type: ignore[arg-type]
            raise ValueError(f"lab subnet {self.subnet} is not a /24 of {RANGE}")

    @property
    def bridge(self) -> str:
        return f"{PREFIX_NS}{self.name}"

    @property
    def host_address(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def dir(self) -> Path:
        return state_root() / self.name

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def cluster_file(self) -> Path:
        return self.dir / "cluster.toml"

    @property
    def client_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def authorized_keys(self) -> Path:
        return self.dir / "authorized_keys"

    def node(self, index: int) -> NodeLayout:
        return NodeLayout(index, f"n{index}", f"{PREFIX_NS}{self.name}-n{index}",
                          f"{PREFIX_LINK}{self.name}h{index}",
                          str(self.subnet.network_address + 1 + index),
                          self.dir / f"n{index}")

    def all_nodes(self) -> list[NodeLayout]:
        return [self.node(i) for i in range(1, self.nodes + 1)]


def netns_prefix(name: str) -> str:
    return f"{PREFIX_NS}{name}-n"


def link_prefix(name: str) -> str:
    return f"{PREFIX_LINK}{name}h"


def subnets() -> list[ipaddress.IPv4Network]:
    return list(RANGE.subnets(new_prefix=24))  # type: ignore[arg-type]
