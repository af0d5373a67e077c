"""TCP sockets this process holds, for the engine's leak counters (MR-16).

``own_tcp_sockets`` reads the TCP sockets this process holds an fd of from Linux ``/proc``
(sessions accepted on the data port). The client side is counted by the transport's pool
(``ConnectionPool.open_by_endpoint``).
"""

from __future__ import annotations

import ipaddress
import os
from typing import NamedTuple

LISTEN = 0x0A


class TcpSocket(NamedTuple):
    local: tuple[str, int]
    remote: tuple[str, int]
    state: int


def _addr(field: str) -> tuple[str, int]:
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    # /proc prints the address as 32-bit words in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def _own_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def own_tcp_sockets() -> list[TcpSocket] | None:
    """Every TCP socket this process holds; None where the kernel does not tell (no /proc)."""
    try:
        inodes = _own_inodes()
    except OSError:
        return None
    out = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                out.append(TcpSocket(_addr(cols[1]), _addr(cols[2]), int(cols[3], 16)))
    return out
