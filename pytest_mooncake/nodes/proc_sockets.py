"""A component's TCP sockets as its node's ``/proc`` shows them (``scripts.SOCKETS`` prints one
line per socket: pid, table, local and remote address in the kernel's hex, state): what an
engine listens on and whom it is connected to, seen from outside without any hook in it."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

#: /proc/net/tcp states (include/net/tcp_states.h)
STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
          6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
          11: "CLOSING"}


@dataclass(frozen=True)
class Socket:
    pid: int
    local: tuple[str, int]
    remote: tuple[str, int]
    state: str

    @property
    def listening(self) -> bool:
        return self.state == "LISTEN"

    @property
    def established(self) -> bool:
        return self.state == "ESTABLISHED"


def _address(text: str) -> tuple[str, int]:
    """``0100007F:1F40`` -> ("127.0.0.1", 8000): the kernel prints each 32-bit word of the
    address in host (little-endian) byte order."""
    hexaddr, _, hexport = text.partition(":")
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(hexport, 16)


def parse(text: str) -> list[Socket]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        pid, _table, local, remote, state = parts
        out.append(Socket(int(pid), _address(local), _address(remote),
                          STATES.get(int(state, 16), state)))
    return out


def of_local_process(pid: int) -> list[Socket] | None:
    """The TCP sockets process ``pid`` of this host holds an fd of, read from ``/proc`` the way
    ``scripts.SOCKETS`` reads them on a node (``/proc/PID/net/tcp*`` lists the sockets of the
    process's network namespace; its fds say which are its own); None when the process is gone
    or ``/proc`` does not tell."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
                 if os.path.islink(f"/proc/{pid}/fd/{fd}")]
    except OSError:
        return None
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    out = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        out += [Socket(pid, _address(row[1]), _address(row[2]), STATES.get(int(row[3], 16), row[3]))
                for row in rows if len(row) > 9 and row[9] in inodes]
    return out
