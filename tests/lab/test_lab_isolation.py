"""The lab sends nothing outside 127.0.0.0/8 and its own addresses: its range is the
benchmarking range, its namespaces route only the lab subnet, its bridge holds only its links
and forwards nothing to the host's other interfaces."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pytest_mooncake.lab import host, network
from pytest_mooncake.lab.layout import RANGE


def test_addresses_are_in_the_benchmarking_range(mc_lab):
    lay = mc_lab.layout
    assert RANGE == ipaddress.ip_network("198.18.0.0/15")
    assert lay.subnet.subnet_of(RANGE)
    addresses = [ipaddress.ip_address(n.address) for n in lay.all_nodes()]
    addresses.append(ipaddress.ip_address(lay.host_address))
    assert all(a in lay.subnet for a in addresses)
    for n in lay.all_nodes():
        found = [a["local"] for e in host.ip_json("addr", "show", ns=n.netns)
                 for a in e.get("addr_info", []) if e["ifname"] != "lo"]
        assert found == [n.address], f"{n.name} holds {found} (IPv6 must be off, one address)"


def test_namespaces_have_no_route_out_of_the_lab(mc_lab):
    lay = mc_lab.layout
    outside = [a["local"] for e in host.ip_json("addr", "show") for a in e.get("addr_info", [])
               if a.get("family") == "inet" and not e["ifname"].startswith("mclab-")
               and not a["local"].startswith("127.")]
    for n in lay.all_nodes():
        routes = host.ip_json("route", "show", "table", "all", ns=n.netns)
        for r in routes:
            assert r.get("dst") != "default", f"{n.name} has a default route: {r}"
            dst = r.get("dst", "")
            if r.get("type") in ("local", "broadcast") or dst.startswith("127."):
                continue
            net = ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False)
            assert net.subnet_of(lay.subnet), f"{n.name} routes {dst} (outside {lay.subnet})"
            assert "gateway" not in r, f"{n.name} routes through a gateway: {r}"
        # a connection to the host's own non-lab addresses fails in the node, before sending
        for address in outside:
            assert network.connect_from(n.netns, address, 22, timeout=2) == "ENETUNREACH"


def test_bridge_holds_only_lab_links_and_forwards_nothing(mc_lab):
    lay = mc_lab.layout
    ports = [e["ifname"] for e in host.ip_json("link", "show", "master", lay.bridge)]
    assert sorted(ports) == sorted(n.link for n in lay.all_nodes())
    # the guard is the lab's nft table, not the bridge's forwarding sysctl (a container engine
    # starting its first network raises ip_forward, and with it every interface's forwarding)
    assert sorted(network.firewall_drops(lay.name)) == [("iifname", lay.bridge),
                                                         ("oifname", lay.bridge)]
    assert Path(f"/proc/sys/net/ipv6/conf/{lay.bridge}/disable_ipv6").read_text().strip() == "1"
    # the host routes the lab subnet only to the bridge
    routes = [r for r in host.ip_json("route", "show")
              if r.get("dst", "").startswith(str(lay.subnet.network_address))]
    assert [r["dev"] for r in routes] == [lay.bridge]


def test_sshd_listens_only_on_the_node_address(mc_lab):
    for n in mc_lab.layout.all_nodes():
        cfg = (n.dir / "sshd_config").read_text()
        assert f"ListenAddress {n.address}\n" in cfg
        assert "PasswordAuthentication no" in cfg
        assert network.connect_from(n.netns, "127.0.0.1", 22, timeout=2) == "ECONNREFUSED"
