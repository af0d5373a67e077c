"""Partitions made with a node's own firewall tool: nftables, else iptables; rules are ours alone.

Each partition lives in objects named after its ledger id, so applying adds only them and
healing removes only them (the operator's own rules are never touched):

* ``nft``: a table ``inet mcchaos_<id>`` with an input and an output chain that drop the
  peers' packets; heal deletes the table. Handles IPv4 and IPv6 peers.
* ``iptables``: chains ``MCC-<id>-I`` / ``MCC-<id>-O`` jumped to from INPUT / OUTPUT; heal
  removes the jumps and the chains. IPv4 peers only (``ip6tables`` is not driven).

A peer is an address, optionally with TCP ports (``198.18.0.2:2379`` cuts only etcd's client
port, both directions). ``direction``: ``both``, ``in`` (drop what the peers send us) or
``out`` (drop what we send them). A sweep removes every object of ours on a node whatever the
ledger says (the heal CLI's last resort).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

Direction = Literal["both", "in", "out"]
PREFIX_NFT = "mcchaos_"
PREFIX_IPT = "MCC-"
_ID = re.compile(r"^[A-Za-z0-9]{1,16}$")


@dataclass(frozen=True)
class Peer:
    address: str
    ports: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Peer:
        """``ADDR``, ``ADDR:PORT`` or ``[V6]:PORT``; raises ValueError naming the text."""
        text = text.strip()
        host, ports = text, ()
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            ports = (int(rest[1:]),) if rest.startswith(":") else ()
        elif text.count(":") == 1:
            host, port = text.split(":")
            ports = (int(port),)
        addr = ipaddress.ip_address(host)
        if any(not 0 < p < 65536 for p in ports):
            raise ValueError(f"port out of range in {text!r}")
        return cls(str(addr), ports)

    @property
    def v6(self) -> bool:
        return ipaddress.ip_address(self.address).version == 6

    def to_json(self) -> str:
        if not self.ports:
            return self.address
        return f"[{self.address}]:{self.ports[0]}" if self.v6 else f"{self.address}:{self.ports[0]}"


def _check_id(fault_id: str) -> str:
    if not _ID.match(fault_id):
        raise ValueError(f"fault id {fault_id!r} is not [A-Za-z0-9]{{1,16}}")
    return fault_id


# ----------------------------------------------------------------------------- nftables


def nft_apply(fault_id: str, peers: list[Peer], direction: Direction) -> str:
    table = PREFIX_NFT + _check_id(fault_id)
    rules_in, rules_out = [], []
    for p in peers:
        fam = "ip6" if p.v6 else "ip"
        ports = ", ".join(str(x) for x in p.ports)
        rules_in.append(f"{fam} saddr {p.address}" + (f" tcp sport {{ {ports} }}" if ports else "")
                        + " drop")
        rules_out.append(f"{fam} daddr {p.address}" + (f" tcp dport {{ {ports} }}" if ports else "")
                         + " drop")
    chains = []
    if direction in ("both", "in"):
        chains.append("  chain input { type filter hook input priority -10; policy accept;\n"
                      + "".join(f"    {r}\n" for r in rules_in) + "  }\n")
    if direction in ("both", "out"):
        chains.append("  chain output { type filter hook output priority -10; policy accept;\n"
                      + "".join(f"    {r}\n" for r in rules_out) + "  }\n")
    ruleset = f"table inet {table} {{\n{''.join(chains)}}}\n"
    return ("nft -f - <<'MCEOF'\n" + ruleset + "MCEOF\n"
            f"nft list table inet {table} >/dev/null\n")


def nft_undo(fault_id: str) -> str:
    table = PREFIX_NFT + _check_id(fault_id)
    return (f"if nft list table inet {table} >/dev/null 2>&1; then nft delete table inet {table}; fi\n"
            f"if nft list table inet {table} >/dev/null 2>&1; then echo 'table {table} is still "
            f"there' >&2; exit 1; fi\n")


NFT_SWEEP = (
    "command -v nft >/dev/null 2>&1 || exit 0\n"
    f"nft list tables 2>/dev/null | awk '$3 ~ /^{PREFIX_NFT}/ {{print $2, $3}}' | "
    "while read -r fam name; do nft delete table \"$fam\" \"$name\" && echo \"removed nft $fam $name\"; done\n"
)


# ----------------------------------------------------------------------------- iptables


def ipt_apply(fault_id: str, peers: list[Peer], direction: Direction) -> str:
    _check_id(fault_id)
    if any(p.v6 for p in peers):
        raise ValueError("the iptables tool drives IPv4 only; install nftables on the node "
                         "for IPv6 peers")
    ipt = "iptables -w 5"
    lines = ["set -e"]
    for side, hook, flag, port_flag in (("I", "INPUT", "-s", "--sport"),
                                        ("O", "OUTPUT", "-d", "--dport")):
        if (side == "I" and direction == "out") or (side == "O" and direction == "in"):
            continue
        chain = f"{PREFIX_IPT}{fault_id}-{side}"
        lines.append(f"{ipt} -N {chain}")
        for p in peers:
            if p.ports:
                for port in p.ports:
                    lines.append(f"{ipt} -A {chain} {flag} {p.address} -p tcp {port_flag} {port} "
                                 f"-j DROP")
            else:
                lines.append(f"{ipt} -A {chain} {flag} {p.address} -j DROP")
        lines.append(f"{ipt} -I {hook} 1 -j {chain}")
    return "\n".join(lines) + "\n"


def ipt_undo(fault_id: str) -> str:
    _check_id(fault_id)
    ipt = "iptables -w 5"
    out = []
    for side, hook in (("I", "INPUT"), ("O", "OUTPUT")):
        chain = f"{PREFIX_IPT}{fault_id}-{side}"
        out.append(f"n=0; while {ipt} -D {hook} -j {chain} 2>/dev/null; do n=$((n+1)); "
                   f"[ $n -lt 100 ] || break; done")
        out.append(f"{ipt} -F {chain} 2>/dev/null || true")
        out.append(f"{ipt} -X {chain} 2>/dev/null || true")
        out.append(f"if {ipt} -S {chain} >/dev/null 2>&1; then echo 'chain {chain} is still "
                   f"there' >&2; exit 1; fi")
    return "\n".join(out) + "\n"


IPT_SWEEP = (
    "command -v iptables >/dev/null 2>&1 || exit 0\n"
    "for hook in INPUT OUTPUT; do\n"
    f"  iptables -w 5 -S \"$hook\" 2>/dev/null | grep -E -- '-j {PREFIX_IPT}[A-Za-z0-9]+-[IO]$' | "
    "sed 's/^-A /-D /' | while read -r rule; do iptables -w 5 $rule && echo \"removed jump $rule\"; done\n"
    "done\n"
    f"iptables -w 5 -S 2>/dev/null | sed -n 's/^-N \\({PREFIX_IPT}[A-Za-z0-9]*-[IO]\\)$/\\1/p' | "
    "while read -r chain; do iptables -w 5 -F \"$chain\"; iptables -w 5 -X \"$chain\" && "
    "echo \"removed chain $chain\"; done\n"
)

#: prints the tools a node has that work (listing needs the kernel's support and privileges)
DETECT = (
    "if command -v nft >/dev/null 2>&1 && nft list tables >/dev/null 2>&1; then echo nft; fi\n"
    "if command -v iptables >/dev/null 2>&1 && iptables -w 5 -S >/dev/null 2>&1; then echo iptables; fi\n"
    "echo \"ssh ${SSH_CONNECTION:-}\"\n"
)

#: lists what partitions are in place on a node (ours only), for status and tests
LIST = (
    "if command -v nft >/dev/null 2>&1; then nft list tables 2>/dev/null | "
    f"awk '$3 ~ /^{PREFIX_NFT}/ {{print \"nft\", $3}}'; fi\n"
    "if command -v iptables >/dev/null 2>&1; then iptables -w 5 -S 2>/dev/null | "
    f"sed -n 's/^-N \\({PREFIX_IPT}[A-Za-z0-9]*-[IO]\\)$/iptables \\1/p'; fi\n"
)


def apply_script(tool: str, fault_id: str, peers: list[Peer], direction: Direction) -> str:
    if tool == "nft":
        return nft_apply(fault_id, peers, direction)
    if tool == "iptables":
        return ipt_apply(fault_id, peers, direction)
    raise ValueError(f"unknown firewall tool {tool!r}")


def undo_script(tool: str, fault_id: str) -> str:
    if tool == "nft":
        return nft_undo(fault_id)
    if tool == "iptables":
        return ipt_undo(fault_id)
    raise ValueError(f"unknown firewall tool {tool!r}")
