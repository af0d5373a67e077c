"""Free loopback ports that stay ours from the moment we pick them until we release them.

Two things can take a port a server of ours is about to bind, or to bind again after a restart
(etcd in fault tests, engines restarted by a nemesis): another test process picking the same
port, and the kernel handing it out as the local port of an outgoing connection.

- Another test process: a port is *claimed* by a file per port in a directory shared by every
  process of this user, held with an exclusive ``flock`` for as long as the port is ours. The
  lock dies with its process (also on SIGKILL), so a claim never outlives its owner; release
  and normal exit remove the file; ``sweep_stale_claims`` removes what a killed process left.
- The kernel: ports are drawn below its ephemeral range (``net.ipv4.ip_local_port_range``),
  which it never picks on its own, so a port stays free while its server is down.
  ``MC_PORT_RANGE=LOW-HIGH`` chooses another range (e.g. where that one is firewalled).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

RANGE_ENV = "MC_PORT_RANGE"
LOWEST_PORT = 20000
"""Below this, registered services crowd the space, and Mooncake transfer engines pick their
RPC port at random in [MC_MIN_RPC_PORT, MC_MAX_RPC_PORT] = [15000, 17000] (P2P handshake), which
could take a port of ours while its server is down."""
MIN_RANGE = 1000

_CLAIMS = Path(tempfile.gettempdir()) / f"pytest-mooncake-port-locks-{os.getuid()}"
_HELD: dict[int, int] = {}
"""Port -> the descriptor whose flock claims it (this process only)."""
_HELD_LOCK = threading.Lock()
_RANDOM = random.Random(os.urandom(16))
"""Not the run's seeded RNG: ports need not replay, and two workers must not draw alike."""


class PortRangeError(ValueError):
    """``MC_PORT_RANGE`` is not LOW-HIGH with 1024 <= LOW < HIGH <= 65535."""


def claims_dir() -> Path:
    """Where the claim files live (shared by every process of this user on this machine)."""
    return _CLAIMS


def port_range() -> range:
    """The ports ``free_port`` draws from: ``MC_PORT_RANGE``, else from 20000 up to the
    kernel's ephemeral range (empty when that range starts too low to leave room)."""
    raw = os.environ.get(RANGE_ENV, "").strip()
    if raw:
        low, sep, high = raw.partition("-")
        try:
            lo, hi = int(low), int(high)
        except ValueError:
            lo = hi = 0
        if not sep or not 1024 <= lo < hi <= 65535:
            raise PortRangeError(f"{RANGE_ENV}={raw!r}: expected LOW-HIGH with "
                                 f"1024 <= LOW < HIGH <= 65535, e.g. {RANGE_ENV}=20000-30000")
        return range(lo, hi + 1)
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    if ephemeral_low - LOWEST_PORT < MIN_RANGE:
        return range(0)
    return range(LOWEST_PORT, ephemeral_low)


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def claim_port(port: int) -> bool:
    """Claim ``port`` for this process; False if another live claim holds it."""
    _CLAIMS.mkdir(mode=0o700, exist_ok=True)
    path = _CLAIMS / str(port)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    if not _same_file(fd, path):  # its owner released it (unlinked) after we opened it
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    with _HELD_LOCK:
        _HELD[port] = fd
    return True


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", attempts: int = 256) -> int:
    """A loopback TCP port that is free now and claimed by this process until
    ``release_port`` (or until the process ends)."""
    ports = port_range()
    for _ in range(attempts):
        if ports:
            port = _RANDOM.choice(ports)
            if not _bindable(host, port):
                continue
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        if claim_port(port):
            return port
    where = f"{ports.start}-{ports.stop - 1}" if ports else "the kernel's ephemeral range"
    raise RuntimeError(f"no free port on {host} in {where} after {attempts} attempts; set "
                       f"{RANGE_ENV}=LOW-HIGH to a range with free ports")


def release_port(port: int) -> None:
    """Give up a claim of this process (a port it does not hold is left alone)."""
    with _HELD_LOCK:
        fd = _HELD.pop(port, None)
    if fd is None:
        return
    try:
        if _same_file(fd, _CLAIMS / str(port)):
            os.unlink(_CLAIMS / str(port))  # while still locked: no one can claim a doomed file
    finally:
        os.close(fd)


def held_ports() -> list[int]:
    with _HELD_LOCK:
        return sorted(_HELD)


def release_all() -> None:
    """Release every claim of this process (at exit; SIGKILL releases the locks by itself)."""
    for port in held_ports():
        release_port(port)


def sweep_stale_claims() -> int:
    """Remove claim files no live process holds (left by a killed one); how many."""
    removed = 0
    try:
        names = os.listdir(_CLAIMS)
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        path = _CLAIMS / name
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, path):
                os.unlink(path)
                removed += 1
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return removed


def _forget_in_child() -> None:
    """A forked child shares the parent's locks; it must neither hold nor remove them."""
    global _HELD_LOCK
    _HELD_LOCK = threading.Lock()
    for fd in _HELD.values():
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(release_all)
