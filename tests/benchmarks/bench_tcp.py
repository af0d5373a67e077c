"""TCP transport throughput: two reference processes vs two real Mooncake 0.3.13 processes.

    python tests/benchmarks/bench_tcp.py [--duration 3] [--rounds 3] [--sizes 4096,65536,1048576]
                                         [--ops write,read] [--no-real]

For each operation (write, read) and block size, with batches of 128 requests and one
submitting thread, runs Mooncake's ``transfer_engine_bench`` (initiator against a target, metadata
in a real etcd) and then the same workload between two reference processes (a target serving a
registered buffer, an initiator issuing ``write_batch`` / ``read_batch_into`` from its own
buffer), back to back, for several rounds; prints the median of the rounds (this machine is
shared, so single runs swing by 2x) and the CPU both processes spent per operation. Every child
runs in its own process group and is killed by group at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

BATCH = 128
BUFFER = 256 << 20
BASE = 0x7E00_0000_0000


def real_bench_binary() -> Path | None:
    try:
        import mooncake
    except ImportError:
        return None
    exe = Path(mooncake.__file__).with_name("transfer_engine_bench")
    return exe if exe.exists() else None


# ----------------------------------------------------------------------- reference processes


def ref_target() -> int:
    from reference_engine.transport import TcpTransport

    mem = bytearray(BUFFER)
    t = TcpTransport()
    t.register_buffer(BASE, memoryview(mem))
    print(t.start(), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    t.stop()
    return 0


def ref_initiator(port: int, op: str, block: int, duration: float) -> int:
    from reference_engine.transport import TcpTransport

    local = bytearray(BUFFER)
    lv = memoryview(local)
    t = TcpTransport(io_timeout=60)
    per_batch = BATCH * block
    slots = max(1, BUFFER // per_batch)
    batches = []
    for s in range(slots):
        off = s * per_batch
        batches.append([(BASE + off + i * block, lv[off + i * block : off + (i + 1) * block])
                        for i in range(BATCH)])
    call = t.write_batch if op == "write" else t.read_batch_into
    call("127.0.0.1", port, batches[0])  # connect and warm up
    done = 0
    start = time.perf_counter()
    deadline = start + duration
    while time.perf_counter() < deadline:
        call("127.0.0.1", port, batches[done % slots])
        done += 1
    elapsed = time.perf_counter() - start
    print(f"{done} {elapsed}", flush=True)
    t.stop()
    return 0


# --------------------------------------------------------------------------------- running


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Children:
    def __init__(self, nice: int = 0) -> None:
        self.procs: list[subprocess.Popen] = []
        self.nice = nice

    def _setup(self) -> None:
        if self.nice:
            os.setpriority(os.PRIO_PROCESS, 0, self.nice)

    def start(self, argv, env=None, **kw) -> subprocess.Popen:
        env = dict(os.environ if env is None else env, MC_TCP_BIND_ADDRESS="127.0.0.1")
        p = subprocess.Popen(  # noqa: S603
            argv, start_new_session=True, env=env, preexec_fn=self._setup, **kw
        )
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait(10)


class Sample(NamedTuple):
    ops: float  # operations per second
    cpu_us: float  # CPU microseconds per operation, initiator + target


def measured(target_pid: int, run) -> Sample:
    """Run one initiator (a child we wait for); charge it and the target's CPU to its ops."""
    c0, t0 = children_cpu(), cpu_seconds(target_pid)
    ops_per_s, elapsed = run()
    cpu = children_cpu() - c0 + cpu_seconds(target_pid) - t0
    return Sample(ops_per_s, cpu / (ops_per_s * elapsed) * 1e6)


def run_reference(children: Children, port: int, op: str, block: int, duration: float):
    p = children.start(
        [sys.executable, __file__, "_ref_initiator", str(port), op, str(block), str(duration)],
        stdout=subprocess.PIPE, text=True,
    )
    out, _ = p.communicate(timeout=duration + 60)
    if p.returncode != 0:
        raise RuntimeError(f"reference initiator failed (rc {p.returncode})")
    batches, elapsed = out.split()
    return int(batches) * BATCH / float(elapsed), float(elapsed)


_DONE = re.compile(r"duration ([\d.]+), batch count (\d+)")


REAL_ATTEMPTS = 3
real_crashes: list[str] = []
"""Runs of the real initiator that died without a result; the round is run again, up to
REAL_ATTEMPTS times, and the count printed. (With grpcio 1.80+ in this process, a child forked
while the etcd3 channel was busy could abort before exec: see docs/reference/real-components.md, "gRPC and fork".)"""


def run_real(children: Children, exe: Path, etcd: str, target: str, op: str, block: int,
             duration: float, log: Path, protocol: str = "tcp", env=None, extra=()):
    """One initiator run of the real bench; ``protocol``, ``env`` and ``extra`` flags let
    bench_verbs.py run the same workload over (emulated) RDMA."""
    for attempt in range(1, REAL_ATTEMPTS + 1):
        try:
            return _run_real_once(children, exe, etcd, target, op, block, duration, log,
                                  protocol, env, extra)
        except RuntimeError as exc:
            real_crashes.append(f"{op} {block}: {exc}")
            if attempt == REAL_ATTEMPTS:
                raise


def _run_real_once(children: Children, exe: Path, etcd: str, target: str, op: str, block: int,
                   duration: float, log: Path, protocol: str, env, extra):
    with open(log, "wb") as f:
        p = children.start(
            [str(exe), "--mode=initiator", f"--protocol={protocol}", *extra,
             f"--metadata_server={etcd}",
             f"--local_server_name=127.0.0.1:{free_port()}", f"--segment_id={target}",
             f"--operation={op}", f"--block_size={block}", f"--batch_size={BATCH}",
             "--threads=1", f"--duration={max(1, round(duration))}", f"--buffer_size={BUFFER}"],
            env=env, stdout=f, stderr=subprocess.STDOUT,
        )
        p.wait(timeout=duration + 60)
    found = _DONE.findall(log.read_text(errors="replace"))
    m = found[-1] if found else None
    if p.returncode != 0 or m is None:
        last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
        raise RuntimeError(f"transfer_engine_bench failed (rc {p.returncode}): {last[0][:200]}")
    elapsed = float(m[0])
    return int(m[1]) * BATCH / elapsed, elapsed


def free_port() -> int:
    from pytest_mooncake.runtime.ports import free_port as fp

    return fp()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--no-real", action="store_true", help="only the reference pair")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of every benchmark process (negative needs root; both "
                         "engines get the same, which steadies the numbers on a busy machine)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ops = args.ops.split(",")
    exe = None if args.no_real else real_bench_binary()
    if exe is None and not args.no_real:
        print("(Mooncake wheel not installed: reference pair only)")

    children = Children(args.nice)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tcp-"))
    etcd = None
    cells = [(op, block) for op in ops for block in sizes]
    real: dict = {c: [] for c in cells}
    mine: dict = {c: [] for c in cells}
    try:
        ref = children.start([sys.executable, __file__, "_ref_target"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ref_port = int(ref.stdout.readline())
        if exe is not None:
            from pytest_mooncake.runtime.etcd_process import EtcdServer
            from pytest_mooncake.waits import wait_until

            etcd = EtcdServer(tmp / "etcd", tmp / "etcd.log").start()
            target = f"127.0.0.1:{free_port()}"
            with open(tmp / "real-target.log", "wb") as f:
                real_target = children.start(
                    [str(exe), "--mode=target", "--protocol=tcp", f"--metadata_server={etcd.uri}",
                     f"--local_server_name={target}", f"--buffer_size={BUFFER}"],
                    stdout=f, stderr=subprocess.STDOUT,
                )
            key = f"mooncake/ram/{target}".encode()
            client = etcd.client()
            wait_until(lambda: client.get(key)[0] is not None, 30, "the real target's descriptor")
        for r in range(args.rounds):
            for op, block in cells:
                if exe is not None:
                    real[op, block].append(measured(real_target.pid, partial(
                        run_real, children, exe, etcd.uri, target, op, block, args.duration,
                        tmp / f"real-{op}-{block}.log")))
                mine[op, block].append(measured(ref.pid, partial(
                    run_reference, children, ref_port, op, block, args.duration)))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        children.kill_all()
        if etcd is not None:
            etcd.close()
    print_table(cells, real, mine, args)
    return 0


def median(samples: list[Sample]) -> Sample:
    ops = sorted(s.ops for s in samples)[len(samples) // 2]
    cpu = sorted(s.cpu_us for s in samples)[len(samples) // 2]
    return Sample(ops, cpu)


def print_table(cells, real, mine, args) -> None:
    print(f"TCP transport, batch {BATCH}, 1 submitting thread, median of {args.rounds} rounds of "
          f"{args.duration:g} s, nice {args.nice}; CPU = initiator + target CPU time per op; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'op':5} {'block':>6} | {'mooncake ops/s':>14} {'GB/s':>5} {'CPU us/op':>9} | "
          f"{'reference ops/s':>15} {'GB/s':>5} {'CPU us/op':>9} | {'ref/real':>8}")
    print("-" * 92)
    for op, block in cells:
        size = f"{block // 1024}K" if block < 1 << 20 else f"{block >> 20}M"
        m = median(mine[op, block])
        if real[op, block]:
            r = median(real[op, block])
            rtxt = f"{r.ops:14,.0f} {r.ops * block / 1e9:5.2f} {r.cpu_us:9.1f}"
            ratio = f"{m.ops / r.ops:8.2f}"
        else:
            rtxt, ratio = f"{'n/a':>14} {'':5} {'':9}", ""
        print(f"{op:5} {size:>6} | {rtxt} | {m.ops:15,.0f} {m.ops * block / 1e9:5.2f} "
              f"{m.cpu_us:9.1f} | {ratio}")
    print("runs (ops/s): " + "; ".join(
        f"{op} {block}: real {[round(s.ops) for s in real[op, block]]} "
        f"ref {[round(s.ops) for s in mine[op, block]]}" for op, block in cells))
    if real_crashes:
        print(f"real initiator runs repeated after dying without a result: {len(real_crashes)}")
        for line in real_crashes:
            print(f"  {line}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_ref_target":
        sys.exit(ref_target())
    if len(sys.argv) > 1 and sys.argv[1] == "_ref_initiator":
        a = sys.argv[2:]
        sys.exit(ref_initiator(int(a[0]), a[1], int(a[2]), float(a[3])))
    sys.exit(main(sys.argv[1:]))
