"""Cost of the embedded Toxiproxy-compatible server with no toxics: throughput (1 MiB blocks)
and round-trip latency (small messages), direct to the upstream vs through a proxy.

Run: ``python tests/benchmarks/bench_toxiproxy.py [--mib 256] [--rounds 2000]``. The upstream
(a sink that acknowledges, and an echo) runs in its own process, the proxy in its own process,
the client here; everything on 127.0.0.1. Prints a table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

BLOCK = 1 << 20


def _serve_sink(conn: socket.socket) -> None:
    """Read an 8-byte length, then that many bytes, then answer one byte."""
    with conn:
        header = b""
        while len(header) < 8:
            header += conn.recv(8 - len(header))
        left = int.from_bytes(header, "big")
        buf = bytearray(BLOCK)
        while left > 0:
            n = conn.recv_into(buf, min(left, BLOCK))
            if not n:
                return
            left -= n
        conn.sendall(b"k")


def _serve_echo(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def _upstreams(ports: multiprocessing.Queue) -> None:
    servers = []
    for handler in (_serve_sink, _serve_echo):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        servers.append((sock, handler))

    def accept(sock: socket.socket, handler) -> None:
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    for sock, handler in servers:
        threading.Thread(target=accept, args=(sock, handler), daemon=True).start()
    ports.put([s.getsockname()[1] for s, _ in servers])
    signal.sigwait([signal.SIGTERM])


def throughput(port: int, mib: int) -> float:
    """MB/s (10^6 bytes) sending ``mib`` MiB in 1 MiB blocks and waiting for the ack."""
    block = b"\xab" * BLOCK
    with socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.perf_counter()
        sock.sendall((mib * BLOCK).to_bytes(8, "big"))
        for _ in range(mib):
            sock.sendall(block)
        assert sock.recv(1) == b"k"
        elapsed = time.perf_counter() - start
    return mib * BLOCK / elapsed / 1e6


def round_trips(port: int, rounds: int, size: int = 64) -> list[float]:
    """Round-trip times in microseconds of ``size``-byte messages."""
    msg = b"m" * size
    out = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(rounds + 50):
            start = time.perf_counter()
            sock.sendall(msg)
            got = 0
            while got < size:
                got += len(sock.recv(size - got))
            if i >= 50:  # warm-up
                out.append((time.perf_counter() - start) * 1e6)
    return out


def _api(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB per throughput run")
    parser.add_argument("--rounds", type=int, default=2000, help="round trips per latency run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is shown)")
    args = parser.parse_args()

    ctx = multiprocessing.get_context("fork")
    ports_q = ctx.Queue()
    upstream = ctx.Process(target=_upstreams, args=(ports_q,), daemon=True)
    upstream.start()
    proxy = subprocess.Popen([sys.executable, "-m", "pytest_mooncake.toxiproxy", "--listen",
                              "127.0.0.1:0", "--seed", "1", "--log-level", "WARNING"],
                             stdout=subprocess.PIPE, text=True)
    try:
        sink_port, echo_port = ports_q.get(timeout=10)
        line = proxy.stdout.readline()
        url = re.search(r"url=(\S+)", line).group(1)
        proxied = {}
        for name, port in (("sink", sink_port), ("echo", echo_port)):
            body = _api(url, "/proxies", {"name": name, "upstream": f"127.0.0.1:{port}",
                                          "listen": "127.0.0.1:0"})
            proxied[name] = int(body["listen"].rsplit(":", 1)[1])

        rows = []
        for label, sink, echo in (("direct", sink_port, echo_port),
                                  ("through proxy", proxied["sink"], proxied["echo"])):
            mbps = max(throughput(sink, args.mib) for _ in range(args.repeat))
            rtts = min((round_trips(echo, args.rounds) for _ in range(args.repeat)),
                       key=statistics.median)
            rtts.sort()
            rows.append((label, mbps, statistics.median(rtts), rtts[int(len(rtts) * 0.99)]))
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=10)
        upstream.terminate()
        upstream.join(timeout=10)

    print(f"embedded toxiproxy, no toxics: {args.mib} MiB in 1 MiB blocks, "
          f"{args.rounds} round trips of 64 B, best of {args.repeat}")
    print(f"{'path':<15} {'throughput MB/s':>16} {'RTT median us':>14} {'RTT p99 us':>11}")
    for label, mbps, med, p99 in rows:
        print(f"{label:<15} {mbps:>16.0f} {med:>14.0f} {p99:>11.0f}")
    (_, d_mbps, d_med, _), (_, p_mbps, p_med, _) = rows
    print(f"proxy cost: throughput x{p_mbps / d_mbps:.2f}, +{p_med - d_med:.0f} us median RTT")


if __name__ == "__main__":
    main()
