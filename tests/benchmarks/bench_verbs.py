"""Emulated RDMA against TCP: one real Mooncake build, same workload, same run.

    python tests/benchmarks/bench_verbs.py [--duration 3] [--rounds 3] [--sizes 65536,1048576]
                                           [--ops write,read] [--devices mlx5_0] [--nice 0]
                                           [--release mooncake-cuda13==0.3.14]

The build is the installed wheel, or with ``--release`` a release's cached environment
(``pytest_mooncake.releases``: installed on first use, with the stand-ins its libraries need).

Runs Mooncake's ``transfer_engine_bench`` (initiator against a target, metadata in a real etcd,
batches of 128, one submitting thread) once with ``--protocol=rdma`` on emulated devices
(pytest_mooncake.verbs: RDMA WRITE/READ are process_vm_writev/readv between the two processes)
and once with ``--protocol=tcp``, back to back per cell, for several rounds; prints the median
of the rounds and the CPU both processes spent per operation. A real NIC moves the bytes without
the CPU; here the posting thread copies them, so the emulator competes with Mooncake's own
busy-polling threads for the machine's cores. Every child runs in its own process group and is
killed by group at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from bench_tcp import (
    BATCH,
    BUFFER,
    Children,
    free_port,
    measured,
    median,
    real_bench_binary,
    real_crashes,
    run_real,
    wait_for,
)


def start_target(children: Children, exe: Path, etcd, protocol: str, env, extra, log: Path) -> tuple:
    name = f"127.0.0.1:{free_port()}"
    with open(log, "wb") as f:
        proc = children.start(
            [str(exe), "--mode=target", f"--protocol={protocol}", *extra,
             f"--metadata_server={etcd.uri}", f"--local_server_name={name}",
             f"--buffer_size={BUFFER}"],
            env=env, stdout=f, stderr=subprocess.STDOUT)
    client = etcd.client()
    wait_for(lambda: client.get(f"mooncake/ram/{name}".encode())[0] is not None, 60,
             f"the {protocol} target's descriptor")
    return name, proc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="65536,1048576")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--devices", default="mlx5_0", help="emulated devices, as for "
                    "`python -m pytest_mooncake.verbs env --devices` (all are given to Mooncake)")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--release", help="a release by version, as --mc-target spells it "
                    "(e.g. mooncake-cuda13==0.3.14); default: the installed wheel")
    args = ap.parse_args(argv)
    base = None
    if args.release:
        from pytest_mooncake.releases import ensure_env

        release = ensure_env(args.release)
        exe, base = release.bench_binary, release.env()
        if exe is None:
            print(f"n/a: {args.release} ships no transfer_engine_bench")
            return 1
    else:
        exe = real_bench_binary()
        if exe is None:
            print("n/a: the Mooncake wheel (mooncake-transfer-engine-non-cuda) is not installed")
            return 1
    from pytest_mooncake.runtime.etcd_process import EtcdServer
    from pytest_mooncake.verbs import EmulatedFabric

    sizes = [int(s) for s in args.sizes.split(",")]
    cells = [(op, block) for op in args.ops.split(",") for block in sizes]
    rdma: dict = {c: [] for c in cells}
    tcp: dict = {c: [] for c in cells}
    tmp = Path(tempfile.mkdtemp(prefix="bench_verbs-"))
    children = Children(args.nice)
    etcd = None
    ok = False
    with EmulatedFabric.create(args.devices) as fabric:
        devices = ",".join(d.name for d in fabric.devices)
        rdma_env, rdma_flags = fabric.apply(base), [f"--device_name={devices}"]
        try:
            etcd = EtcdServer(tmp / "etcd", tmp / "etcd.log").start()
            rdma_target, rdma_proc = start_target(children, exe, etcd, "rdma", rdma_env,
                                                  rdma_flags, tmp / "rdma-target.log")
            tcp_target, tcp_proc = start_target(children, exe, etcd, "tcp", base, [],
                                                tmp / "tcp-target.log")
            for r in range(args.rounds):
                for op, block in cells:
                    rdma[op, block].append(measured(rdma_proc.pid, partial(
                        run_real, children, exe, etcd.uri, rdma_target, op, block,
                        args.duration, tmp / f"rdma-{op}-{block}.log", "rdma", rdma_env,
                        rdma_flags)))
                    tcp[op, block].append(measured(tcp_proc.pid, partial(
                        run_real, children, exe, etcd.uri, tcp_target, op, block,
                        args.duration, tmp / f"tcp-{op}-{block}.log", "tcp", base)))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
            ok = True
        finally:
            children.kill_all()
            if etcd is not None:
                etcd.close()
            if ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print(f"logs of the processes kept in {tmp}", file=sys.stderr)
    print_table(cells, rdma, tcp, args, devices)
    return 0


def print_table(cells, rdma, tcp, args, devices: str) -> None:
    print(f"Mooncake transfer_engine_bench ({args.release or 'the installed wheel'}), batch {BATCH}, 1 submitting thread, median of "
          f"{args.rounds} rounds of {args.duration:g} s, nice {args.nice}; emulated RDMA on "
          f"{devices} vs TCP; CPU = initiator + target CPU time per op; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'op':5} {'block':>6} | {'rdma ops/s':>10} {'GB/s':>5} {'CPU us/op':>9} | "
          f"{'tcp ops/s':>10} {'GB/s':>5} {'CPU us/op':>9} | {'rdma/tcp':>8}")
    print("-" * 82)
    for op, block in cells:
        size = f"{block // 1024}K" if block < 1 << 20 else f"{block >> 20}M"
        r, t = median(rdma[op, block]), median(tcp[op, block])
        print(f"{op:5} {size:>6} | {r.ops:10,.0f} {r.ops * block / 1e9:5.2f} {r.cpu_us:9.1f} | "
              f"{t.ops:10,.0f} {t.ops * block / 1e9:5.2f} {t.cpu_us:9.1f} | "
              f"{r.ops / t.ops:8.2f}")
    print("runs (ops/s): " + "; ".join(
        f"{op} {block}: rdma {[round(s.ops) for s in rdma[op, block]]} "
        f"tcp {[round(s.ops) for s in tcp[op, block]]}" for op, block in cells))
    if real_crashes:
        print(f"initiator runs repeated after dying without a result: {len(real_crashes)}")
        for line in real_crashes:
            print(f"  {line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
