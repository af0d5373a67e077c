"""An sshd per lab node (Debian's openssh-server), each with its own config and host key, listening
only on the node's address, accepting only the lab's generated key, and only from the lab host.

The controller trusts exactly the nodes' host keys (a known_hosts file the lab writes), so the
cluster file the lab writes is used with host key checking on, as on a real cluster.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from pytest_mooncake.lab import host
from pytest_mooncake.lab.host import LabError
from pytest_mooncake.lab.layout import LabLayout, NodeLayout

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")


def keygen(path: Path, comment: str) -> str:
    """An ed25519 key pair at ``path``; returns the public key line."""
    host.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
    return path.with_name(path.name + ".pub").read_text().strip()


def prepare_client(layout: LabLayout) -> str:
    """The lab's client key and its authorized_keys (only from the lab host's address)."""
    pub = keygen(layout.client_key, f"mclab-{layout.name}")
    layout.authorized_keys.write_text(f'from="{layout.host_address}" {pub}\n')
    layout.authorized_keys.chmod(0o600)
    return pub


def config(layout: LabLayout, node: NodeLayout) -> str:
    return "\n".join([
        f"ListenAddress {node.address}",
        "Port 22",
        f"HostKey {node.dir / 'ssh_host_ed25519_key'}",
        f"PidFile {node.dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {layout.authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "AllowUsers root",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PrintMotd no",
        "MaxStartups 64",
        "MaxSessions 64",
        "LogLevel INFO",
        "",
    ])


def prepare_node(layout: LabLayout, node: NodeLayout) -> str:
    """Host key and config of ``node``'s sshd; returns its known_hosts line."""
    node.dir.mkdir(parents=True, exist_ok=True)
    Path(node.run_dir).mkdir(parents=True, exist_ok=True)
    pub = keygen(node.dir / "ssh_host_ed25519_key", f"{node.name}@mclab-{layout.name}")
    (node.dir / "sshd_config").write_text(config(layout, node))
    kind, key = pub.split()[:2]
    return f"{node.address} {kind} {key}"


def ensure_privsep_dir() -> bool:
    """sshd refuses to start without /run/sshd; True when we created it."""
    if PRIVSEP_DIR.is_dir():
        return False
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True)
    return True


def start(node: NodeLayout) -> None:
    """Start the node's sshd inside its namespace (it daemonizes; the pid file names it)."""
    host.run("ip", "netns", "exec", node.netns, SSHD, "-f", str(node.dir / "sshd_config"),
             "-E", str(node.dir / "sshd.log"), timeout=15)


def wait_listening(node: NodeLayout, deadline: float) -> None:
    last = ""
    while True:
        try:
            with socket.create_connection((node.address, 22), timeout=1.0) as s:
                s.settimeout(max(0.5, deadline - time.monotonic()))
                if s.recv(64).startswith(b"SSH-"):
                    return
                last = "no SSH banner"
        except OSError as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            log = node.dir / "sshd.log"
            tail = log.read_text()[-800:] if log.exists() else "(no sshd.log)"
            raise LabError(f"sshd of {node.name} ({node.address}:22) not answering: {last}; "
                           f"sshd.log:\n{tail}")
        time.sleep(0.02)


def pid(node: NodeLayout) -> int | None:
    try:
        text = (node.dir / "sshd.pid").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and os.path.exists(f"/proc/{text}") else None
