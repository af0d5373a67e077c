"""The lab's network: a bridge on the host, one namespace per node joined to it by a veth pair.

Isolation, by construction: a node's namespace has one interface (``eth0``, its lab address
/24) and loopback, so its only routes are the lab subnet's; it has no default route, and a
packet for any other address fails in the node with "network unreachable" before it is sent.
The bridge holds only the lab's veth ends, IPv6 is disabled on every lab link, and the lab's own
nftables table (``inet mclab_<name>``) drops every packet the host would route into or out of
the bridge, so nothing the nodes send can leave through the host either. The bridge's
``forwarding`` sysctl is switched off too, but it is not the guard: a container engine raising
``net.ipv4.ip_forward`` (Podman does, on its first network) turns it back on for every
interface, and the nft rule does not depend on it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field

from pytest_mooncake.lab import host
from pytest_mooncake.lab.host import LabError
from pytest_mooncake.lab.layout import (
    RANGE,
    LabLayout,
    NodeLayout,
    link_prefix,
    netns_prefix,
    state_root,
)


def firewall_table(name: str) -> str:
    """The lab's nftables table (family ``inet``): nft names take no dashes."""
    return f"mclab_{name}"


def _firewall_ruleset(layout: LabLayout) -> str:
    br, table = layout.bridge, firewall_table(layout.name)
    # Routed traffic only: frames bridged between two lab ports enter and leave on the bridge
    # itself (also with br_netfilter loaded), so they match neither rule.
    return (f"table inet {table} {{\n"
            f"  chain forward {{\n"
            f"    type filter hook forward priority -10; policy accept;\n"
            f"    iifname \"{br}\" oifname != \"{br}\" drop\n"
            f"    oifname \"{br}\" iifname != \"{br}\" drop\n"
            f"  }}\n"
            f"}}\n")


def firewall_drops(name: str) -> list[tuple[str, str]]:
    """The (direction, interface) pairs the lab's table drops now: ``[]`` when it is absent."""
    done = host.run("nft", "-j", "list", "table", "inet", firewall_table(name), check=False)
    if done.returncode != 0:
        return []
    drops = []
    for item in json.loads(done.stdout).get("nftables", []):
        rule = item.get("rule")
        if not rule or not any("drop" in e for e in rule.get("expr", [])):
            continue
        for e in rule["expr"]:
            m = e.get("match", {})
            if m.get("op") == "==" and m.get("left", {}).get("meta", {}).get("key") in (
                    "iifname", "oifname"):
                drops.append((m["left"]["meta"]["key"], m["right"]))
    return drops


def firewall_tables() -> list[str]:
    """Names of the labs whose nftables table is on the host."""
    done = host.run("nft", "list", "tables", check=False)
    return [m.group(1) for m in re.finditer(r"^table inet mclab_([a-z0-9]{1,6})$",
                                            done.stdout, re.M)]


def build_bridge(layout: LabLayout) -> None:
    br = layout.bridge
    host.run("ip", "link", "add", br, "type", "bridge")
    host.write_sysctl(f"/proc/sys/net/ipv6/conf/{br}/disable_ipv6", "1")
    host.write_sysctl(f"/proc/sys/net/ipv4/conf/{br}/forwarding", "0")
    host.run("nft", "-f", "-", stdin=_firewall_ruleset(layout))
    host.run("ip", "addr", "add", f"{layout.host_address}/24", "dev", br)
    host.run("ip", "link", "set", br, "up")


def build_node(layout: LabLayout, node: NodeLayout) -> None:
    ns, link, peer = node.netns, node.link, f"{node.link}p"
    host.run("ip", "netns", "add", ns)
    host.run("ip", "link", "add", link, "type", "veth", "peer", "name", peer)
    host.write_sysctl(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6", "1")
    host.run("ip", "link", "set", peer, "netns", ns)
    host.write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1", ns=ns)
    host.run("ip", "-n", ns, "link", "set", peer, "name", "eth0")
    host.run("ip", "-n", ns, "addr", "add", f"{node.address}/24", "dev", "eth0")
    host.run("ip", "-n", ns, "link", "set", "lo", "up")
    host.run("ip", "-n", ns, "link", "set", "eth0", "up")
    host.run("ip", "link", "set", link, "master", layout.bridge)
    host.run("ip", "link", "set", link, "up")


@dataclass(frozen=True)
class RangeUse:
    interface: str
    network: str


def range_in_use() -> list[RangeUse]:
    """Addresses and routes of ``RANGE`` on this host that are not a lab's (bridges named
    ``mclab-*``)."""
    used = []
    for entry in host.ip_json("addr", "show"):
        name = entry.get("ifname", "")
        for a in entry.get("addr_info", []):
            if a.get("family") != "inet":
                continue
            net = ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}").network
            if net.overlaps(RANGE) and not name.startswith("mclab-"):
                used.append(RangeUse(name, str(net)))
    for r in host.ip_json("route", "show"):
        dst = r.get("dst", "")
        if dst in ("", "default"):
            continue
        net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        dev = r.get("dev", "")
        if net.overlaps(RANGE) and not dev.startswith("mclab-"):
            used.append(RangeUse(dev or "(route)", str(net)))
    return used


def subnets_on_bridges() -> set[str]:
    """The /24s lab bridges hold now (a lab whose state file is gone still owns its subnet)."""
    held = set()
    for entry in host.ip_json("addr", "show"):
        if entry.get("ifname", "").startswith("mclab-"):
            for a in entry.get("addr_info", []):
                if a.get("family") == "inet":
                    held.add(str(ipaddress.ip_interface(f"{a['local']}/24").network))
    return held


@dataclass(frozen=True)
class Leftovers:
    namespaces: list[str]
    links: list[str]
    firewall: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.namespaces or self.links or self.firewall)


def leftovers(name: str) -> Leftovers:
    """Namespaces and links of lab ``name`` present on the host now."""
    ns_re = re.compile("^" + re.escape(netns_prefix(name)) + r"\d+$")
    link_re = re.compile("^(" + re.escape(link_prefix(name)) + r"\d+p?|mclab-" + re.escape(name)
                         + ")$")
    return Leftovers([n for n in host.netns_list() if ns_re.match(n)],
                     [n for n in host.link_names() if link_re.match(n.split("@")[0])],
                     [firewall_table(name)] if name in firewall_tables() else [])


def lab_names_on_host() -> set[str]:
    """Names of labs with a bridge or a namespace on the host (state files aside)."""
    names = set()
    for n in host.netns_list():
        m = re.match(r"^mclab-([a-z0-9]{1,6})-n\d+$", n)
        if m:
            names.add(m.group(1))
    for n in host.link_names():
        m = re.match(r"^mclab-([a-z0-9]{1,6})$", n)
        if m:
            names.add(m.group(1))
    return names | set(firewall_tables())


def tear_down(name: str) -> list[str]:
    """Kill every process in the lab's namespaces, delete namespaces, links and bridge.
    Returns what could not be removed (empty when clean)."""
    problems = []
    left = leftovers(name)
    for _ in range(3):  # again: a daemon forking while the first round ran is found next
        pids = sorted({p for ns in left.namespaces for p in host.netns_pids(ns)}
                      | set(host.pids_naming(f"{state_root() / name}/")))
        if not pids:
            break
        stuck = host.terminate(pids)
        if stuck:
            problems.append(f"processes survived SIGKILL: {stuck}")
            break
    for ns in left.namespaces:
        done = host.run("ip", "netns", "del", ns, check=False)
        if done.returncode != 0:
            problems.append(f"ip netns del {ns}: {done.stderr.strip()}")
    for link in leftovers(name).links:
        done = host.run("ip", "link", "del", link.split("@")[0], check=False)
        if done.returncode != 0 and "Cannot find device" not in done.stderr:
            problems.append(f"ip link del {link}: {done.stderr.strip()}")
    for table in leftovers(name).firewall:
        done = host.run("nft", "delete", "table", "inet", table, check=False)
        if done.returncode != 0:
            problems.append(f"nft delete table inet {table}: {done.stderr.strip()}")
    final = leftovers(name)
    if final:
        problems.append(f"still present: {final}")
    return problems


def check_no_leftovers(name: str) -> None:
    left = leftovers(name)
    if left:
        raise LabError(f"lab {name}: leftovers on the host: {left}")


_CONNECT = """
import errno, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except socket.timeout:
    print("ETIMEDOUT")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, str(exc)))
"""


def connect_from(netns: str, host_: str, port: int, timeout: float = 2.0) -> str:
    """Try a TCP connection from inside ``netns``: ``connected``, or the errno's name
    (``EPERM`` when our own output rule drops it, ``ETIMEDOUT`` when the far side drops it,
    ``ENETUNREACH`` when no route leads there, ``ECONNREFUSED``)."""
    import sys

    done = host.run("ip", "netns", "exec", netns, sys.executable, "-c", _CONNECT, host_,
                    str(port), str(timeout), timeout=timeout + 15)
    return done.stdout.strip()
