"""Commands the lab runs on its host (as root): iproute2, sysctl files, process signals.

The lab drives ``ip`` (iproute2) rather than netlink from Python: the commands are the ones an
operator types to inspect or repair a lab, every call has a deadline, and an error carries the
command and what ``ip`` said. (pyroute2 would be the library; it adds nothing these few calls
need.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


class LabError(RuntimeError):
    """The lab cannot be built, inspected or removed; the message says what to do."""


def run(*args: str, timeout: float = 10.0, check: bool = True,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              input=stdin)
    except FileNotFoundError:
        raise LabError(f"`{args[0]}` is not installed on this host") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(args)}` did not finish within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise LabError(f"`{' '.join(args)}` exited {done.returncode}: "
                       f"{(done.stderr or done.stdout).strip()}")
    return done


def ip_json(*args: str, ns: str | None = None) -> list[dict[str, Any]]:
    cmd = ["ip", "-j"] + (["-n", ns] if ns else []) + list(args)
    out = run(*cmd).stdout.strip()
    return json.loads(out) if out else []


def netns_list() -> list[str]:
    return [entry["name"] for entry in ip_json("netns", "list")]


def link_names() -> list[str]:
    return [entry["ifname"] for entry in ip_json("link", "show")]


def write_sysctl(path: str, value: str, ns: str | None = None) -> None:
    """Write a /proc/sys file, inside namespace ``ns`` when given."""
    if ns is None:
        Path(path).write_text(value)
    else:
        run("ip", "netns", "exec", ns, "sh", "-c", f"echo {value} > {path}")


def netns_pids(ns: str) -> list[int]:
    done = run("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def pids_naming(path: str) -> list[int]:
    """Processes whose command line names something under ``path`` (a lab's run directory):
    what the lab started, also where its namespace is already gone or was never scanned (an
    sshd that daemonized while ``up`` was being interrupted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(path.encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def terminate(pids: list[int], grace: float = 3.0, hard: float = 3.0) -> list[int]:
    """SIGTERM (and SIGCONT, for paused ones), SIGKILL to what is left after ``grace`` s;
    returns the pids still alive ``hard`` s after that (should be none)."""
    _signal(pids, signal.SIGTERM)
    _signal(pids, signal.SIGCONT)
    left = _wait_gone(pids, grace)
    _signal(left, signal.SIGKILL)
    return _wait_gone(left, hard)


def probe() -> str | None:
    """Why a lab cannot be built here, or None: root, iproute2, sshd and a namespace that can be
    created (a container may forbid it)."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, veth pairs, a bridge)"
    for tool, package in (("ip", "iproute2"), ("ssh-keygen", "openssh-client"),
                          ("etcd", "etcd-server")):
        if not _which(tool):
            return f"`{tool}` is not installed (apt-get install {package})"
    if not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (apt-get install openssh-server)"
    for stale in _stale_probes():
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, timeout=10)
    name = f"mclab-probe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True,
                          timeout=10)
    if done.returncode != 0:
        return f"`ip netns add` is not permitted here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


def _stale_probes() -> list[str]:
    """Probe namespaces of processes that died between creating and deleting one."""
    try:
        names = netns_list()
    except LabError:
        return []
    return [n for n in names if n.startswith("mclab-probe")
            and n[len("mclab-probe"):].isdigit() and not os.path.exists(f"/proc/{n[11:]}")]


def _which(tool: str) -> bool:
    from shutil import which

    return which(tool) is not None
