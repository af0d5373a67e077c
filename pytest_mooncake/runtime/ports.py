"""Free loopback ports that no other xdist worker (or earlier test) will hand out again.

The kernel picks a free port (bind to port 0); a sentinel file created with O_EXCL in a
directory shared by all workers of this machine makes the claim exclusive between the moment
we close our probe socket and the moment the real server binds it.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

_CLAIMS = Path(tempfile.gettempdir()) / f"pytest-mooncake-ports-{os.getuid()}"
_STALE_SECONDS = 6 * 3600


def _claim(port: int) -> bool:
    _CLAIMS.mkdir(exist_ok=True)
    path = _CLAIMS / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - path.stat().st_mtime > _STALE_SECONDS:
                path.unlink()
                return _claim(port)
        except FileNotFoundError:
            return _claim(port)
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def free_port(host: str = "127.0.0.1", attempts: int = 64) -> int:
    """A loopback TCP port that is free now and claimed for this run."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if _claim(port):
            return port
    raise RuntimeError(f"no free port on {host} after {attempts} attempts")


def release_port(port: int) -> None:
    try:
        (_CLAIMS / str(port)).unlink()
    except FileNotFoundError:
        pass
