"""Hostile and idle peers against every server: the table of issue 14.

    python tests/benchmarks/bench_hostile_peers.py [--idle 200] [--fuzz-examples 1000]
                                                   [--skip-fuzz]

1. Fuzz: runs ``tests/hostile`` under pytest with ``MC_FUZZ_EXAMPLES`` generated inputs per
   server; each fuzz test checks every answer, a value stored before, and the process's RSS, and
   prints its input count and the server's footprint before and after.
2. Idle peers: starts each server as a process with its default limits, opens ``--idle``
   connections that send nothing, and reports the process's threads and resident memory before,
   with them (after 1 s) and after they closed, and whether a good request was served meanwhile.

Runs against whatever ``reference_engine`` is importable (so it also measures an older checkout:
``PYTHONPATH=/path/to/checkout python tests/benchmarks/bench_hostile_peers.py --skip-fuzz``).
Every process is reaped at exit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "hostile"))

from hostile import footprint, http_request  # noqa: E402

from pytest_mooncake.raw_peers import exchange  # noqa: E402
from pytest_mooncake.runtime.etcd_process import EtcdServer  # noqa: E402
from pytest_mooncake.runtime.processes import Supervisor, log_matches  # noqa: E402
from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster  # noqa: E402
from reference_engine.transport import TcpTransport  # noqa: E402

PY = sys.executable


def _ready(proc, pattern: str = '"event": "ready"') -> dict:
    return next(json.loads(line) for line in proc.log_text().splitlines() if pattern in line)


def _http_ok(address: tuple[str, int], path: str) -> bool:
    data = exchange(address, http_request("GET", path)).data
    return data.startswith(b"HTTP/1.1 200")


def _frame(obj: dict) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def measure_idle(name: str, pid: int, address: tuple[str, int], good: Callable[[], bool],
                 count: int) -> dict:
    before = footprint(pid)
    crowd = []
    try:
        for _ in range(count):
            crowd.append(socket.create_connection(address, timeout=10))
    except OSError as exc:
        print(f"{name}: could open only {len(crowd)} connections: {exc}", file=sys.stderr)
    time.sleep(1.0)  # a benchmark's settling pause, not synchronisation
    during = footprint(pid)
    try:
        served = good()
    except (OSError, AssertionError) as exc:
        served = f"no ({type(exc).__name__})"
    for s in crowd:
        s.close()
    time.sleep(1.0)
    after = footprint(pid)
    return {"server": name, "idle": len(crowd), "before": before, "during": during,
            "after": after, "served": served}


def idle_rows(workdir: Path, count: int) -> list[dict]:
    sup = Supervisor(workdir / "logs", name="bench-hostile")
    etcd = EtcdServer(workdir / "etcd", workdir / "logs" / "etcd.log").start()
    cluster = None
    rows = []
    try:
        meta = sup.start("metadata-server", [PY, "-m", "reference_engine", "metadata-server",
                                             "--listen", "127.0.0.1:0"],
                         ready=log_matches('"event": "ready"'))
        meta_ready = _ready(meta)
        meta_addr = ("127.0.0.1", meta_ready["port"])
        eng = sup.start("engine", [PY, "-m", "reference_engine", "engine", "--name", "bench",
                                   "--metadata", meta_ready["url"], "--buffer-size", "1048576"],
                        ready=log_matches('"event": "ready"'))
        ready = _ready(eng)
        data = ("127.0.0.1", ready["data_port"])
        control = ("127.0.0.1", ready["control_port"])
        base = ready["buffers"][0][0]
        with TcpTransport() as reader:  # a pooled client, as engines use it
            rows.append(measure_idle("engine data port", eng.pid, data,
                                     lambda: len(reader.read(*data, base, 64)) == 64, count))
        rows.append(measure_idle(
            "engine control port", eng.pid, control,
            lambda: b'"ok": true' in exchange(control, b'{"op": "info"}\n').data, count))
        cluster = ReferenceMasterCluster(etcd.endpoints, workdir / "cluster", "rfc", 1, 0)
        master = cluster.masters[0]
        rpc = ("127.0.0.1", master.rpc_port)
        hello = _frame({"op": "hello", "version": "1.3.0", "client_id": "bench"})
        rows.append(measure_idle("master RPC port", master.process.pid, rpc,
                                 lambda: b'"ok":true' in exchange(rpc, hello).data, count))
        admin = ("127.0.0.1", master.admin_port)
        rows.append(measure_idle("master admin HTTP", master.process.pid, admin,
                                 lambda: _http_ok(admin, "/health"), count))
        rows.append(measure_idle("metadata HTTP", meta.pid, meta_addr,
                                 lambda: _http_ok(meta_addr, "/health"), count))
        toxi = sup.start("toxiproxy", [PY, "-m", "pytest_mooncake.toxiproxy", "--listen",
                                       "127.0.0.1:0", "--seed", "1"],
                         ready=log_matches("mc-toxiproxy ready:"))
        port = int(re.search(r"url=http://127\.0\.0\.1:(\d+)", toxi.log_text()).group(1))
        toxi_addr = ("127.0.0.1", port)
        rows.append(measure_idle("Toxiproxy API", toxi.pid, toxi_addr,
                                 lambda: _http_ok(toxi_addr, "/version"), count))
    finally:
        if cluster is not None:
            cluster.close()
        sup.stop_all()
        etcd.close()
    return rows


FUZZ_LINE = re.compile(r"^[.sFE]*(?P<server>[A-Za-z ]+): (?P<inputs>\d+) inputs; \w+ before "
                       r"(?P<before>.+?), after (?P<after>.+)$", re.M)


def fuzz_rows(examples: int) -> list[dict]:
    env = dict(os.environ, MC_FUZZ_EXAMPLES=str(examples))
    proc = subprocess.run(  # noqa: S603
        [PY, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-k", "fuzzed",
         str(ROOT / "tests" / "hostile")], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=3600, check=False)
    rows = [m.groupdict() for m in FUZZ_LINE.finditer(proc.stdout)]
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
    for row in rows:
        row["outcome"] = "all checks held" if proc.returncode == 0 else f"see: {summary}"
    if proc.returncode != 0:
        print(proc.stdout[-4000:], file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=200, help="idle connections per server")
    ap.add_argument("--fuzz-examples", type=int, default=1000,
                    help="generated fuzz inputs per server (plus the explicit ones)")
    ap.add_argument("--skip-fuzz", action="store_true")
    args = ap.parse_args()
    if not args.skip_fuzz:
        print(f"{'server':22} {'inputs':>7}  outcome           RSS before -> after")
        for r in fuzz_rows(args.fuzz_examples):
            print(f"{r['server']:22} {r['inputs']:>7}  {r['outcome']:16}  "
                  f"{r['before'].split(',')[0]} -> {r['after'].split(',')[0]}")
        print()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        rows = idle_rows(Path(tmp), args.idle)
    print(f"{'server':22} {'idle':>5}  {'threads before/with/after':>26}  "
          f"{'RSS MiB before/with/after':>26}  served meanwhile")
    for r in rows:
        threads = f"{r['before'].threads}/{r['during'].threads}/{r['after'].threads}"
        rss = "/".join(f"{x.rss / 2**20:.0f}" for x in (r["before"], r["during"], r["after"]))
        print(f"{r['server']:22} {r['idle']:>5}  {threads:>26}  {rss:>26}  {r['served']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
