"""A throw-away single-member etcd on loopback for probes run outside pytest (the CLI).

Inside pytest, pass the ``mc_etcd`` fixture's endpoint instead. The etcd binary is Debian's
``etcd-server`` (``$MC_ETCD_BIN`` overrides); its data directory is a temporary directory
removed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pytest_mooncake.releases.procs import running, wait_until
from pytest_mooncake.runtime.ports import free_port, release_port

HINT = "install etcd (apt-get install -y etcd-server) or set MC_ETCD_BIN, or pass --etcd HOST:PORT"


def etcd_binary() -> str:
    explicit = os.environ.get("MC_ETCD_BIN")
    found = explicit or shutil.which("etcd") or next(
        (p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if os.access(p, os.X_OK)), None)
    if not found or not os.access(found, os.X_OK):
        raise FileNotFoundError(f"no etcd binary ({explicit or 'etcd'} not found): {HINT}")
    return found


def healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=1.0) as resp:
            return json.loads(resp.read() or b"{}").get("health") in ("true", True)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def scratch_etcd(timeout: float = 30.0) -> Iterator[str]:
    """Yield ``127.0.0.1:PORT`` of a fresh etcd; stop it and delete its data on exit."""
    binary = etcd_binary()
    with tempfile.TemporaryDirectory(prefix="mc-release-etcd-") as tmp:
        client, peer = free_port(), free_port()
        curl, purl = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        argv = [binary, "--name", "probe", "--data-dir", str(Path(tmp) / "data"),
                "--listen-client-urls", curl, "--advertise-client-urls", curl,
                "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                "--initial-cluster", f"probe={purl}", "--log-level", "warn", "--logger", "zap"]
        log = Path(tmp) / "etcd.log"
        endpoint = f"127.0.0.1:{client}"
        try:
            with running(argv, os.environ, log) as proc:
                wait_until(lambda: healthy(endpoint), timeout, f"etcd at {endpoint} healthy",
                           proc, log)
                yield endpoint
        finally:
            release_port(client)
            release_port(peer)


def etcd_get(endpoint: str, key: str, timeout: float = 5.0) -> bytes | None:
    """The value of ``key`` through etcd's JSON gateway (no gRPC client needed), or None."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    req = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback)
        kvs = json.loads(resp.read()).get("kvs") or []
    return base64.b64decode(kvs[0]["value"]) if kvs else None
