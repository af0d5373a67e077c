"""The run's container networks: each a /20 of 198.18.0.0/15 (4,094 addresses: every
component a session starts gets its own) taken from the top down (the network-namespace lab
takes its /24s from the bottom up, so the two meet only after 200 labs), internal (no route out:
containers reach only each other and this host's end of the bridge), with a bridge named
``mclab-d…`` so the lab counts it as its own and never reports it as a foreign use of the
range. Never Podman's 10.88.0.0/16."""

from __future__ import annotations

import ipaddress
import itertools
import json
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

RANGE = ipaddress.ip_network("198.18.0.0/15")
PREFIX = 20
RESERVED = {ipaddress.ip_network("198.19.255.0/24")}
"""Podman's default network of ours (``podman_home.DEFAULT_SUBNET``): never attached."""
BRIDGE_PREFIX = "mclab-d"


def host_networks() -> set[ipaddress.IPv4Network]:
    """IPv4 networks on this host's interfaces and routes now."""
    found = set()
    for what in ("addr", "route"):
        try:
            out = subprocess.run(["ip", "-j", "-4", what, "show"], capture_output=True, text=True,
                                 timeout=10, check=False).stdout
            entries = json.loads(out or "[]")
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
        for entry in entries:
            for a in entry.get("addr_info", []):
                found.add(ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}").network)
            dst = entry.get("dst", "")
            if dst and dst != "default":
                found.add(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return found


def engine_networks(client: Any) -> set[ipaddress.IPv4Network]:
    found = set()
    for net in client.networks.list():
        for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
            subnet = cfg.get("Subnet")
            if subnet and ":" not in subnet:
                found.add(ipaddress.ip_network(subnet, strict=False))
    return found


def candidates(taken: set[ipaddress.IPv4Network]) -> Iterator[ipaddress.IPv4Network]:
    for net in reversed(list(RANGE.subnets(new_prefix=PREFIX))):
        if not any(net.overlaps(t) for t in taken | RESERVED):
            yield net


def create_network(client: Any, name: str, labels: Mapping[str, str], attempts: int = 8) -> Any:
    """A new internal bridge network on a free /20 (another run may take the same /24 at the
    same moment: the engine refuses the second, which tries the next)."""
    import docker  # noqa: PLC0415

    taken = host_networks() | engine_networks(client)
    last: Exception | None = None
    for subnet in itertools.islice(candidates(taken), attempts):
        gateway = str(subnet.network_address + 1)
        ipam = docker.types.IPAMConfig(pool_configs=[
            docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)])
        try:
            return client.networks.create(
                name, driver="bridge", internal=True, ipam=ipam, labels=dict(labels),
                options={"com.docker.network.bridge.name": BRIDGE_PREFIX + secrets.token_hex(4)})
        except docker.errors.APIError as exc:
            last = exc
    raise RuntimeError(f"no free /{PREFIX} of {RANGE} for container network {name}: {last}")


def subnet_of(network: Any) -> ipaddress.IPv4Network:
    network.reload()
    cfg = (network.attrs.get("IPAM") or {}).get("Config") or [{}]
    return ipaddress.ip_network(cfg[0]["Subnet"])
