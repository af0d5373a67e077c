"""Run by a release environment's python, never imported: it needs only the standard library
and the release's ``mooncake`` package (which the plugin's own python may not have).

    python peer_script.py attrs
        one JSON line: the release's Python API (TransferEngine / store methods, modules)
    python peer_script.py target --segment NAME --metadata URI --size N
        a TransferEngine with one registered buffer of N zero bytes; prints one JSON line
        {"ready": ..., "buffer": ADDR} when published, then answers stdin lines:
        "digest" -> {"sha256": ...} of its buffer, "quit" -> exits
    python peer_script.py initiator --segment NAME --metadata URI --target SEG --size N --seed S
        writes N seeded bytes into SEG's first buffer, reads them back into another place,
        prints one JSON line {"write_rc", "read_rc", "equal", "sha256", ...} and exits
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import sys
import time


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def attrs() -> dict:
    import mooncake

    out: dict = {"package_dir": os.path.dirname(mooncake.__file__),
                 "modules": sorted(n[:-3] for n in os.listdir(os.path.dirname(mooncake.__file__))
                                   if n.endswith(".py") and not n.startswith("_"))}
    for label, module, cls in (("engine", "mooncake.engine", "TransferEngine"),
                               ("store", "mooncake.store", "MooncakeDistributedStore")):
        try:
            mod = __import__(module, fromlist=[cls])
            out[f"{label}_methods"] = sorted(n for n in dir(getattr(mod, cls)) if not n.startswith("_"))
        except Exception as exc:  # noqa: BLE001 (a probe reports, it does not crash)
            out[f"{label}_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import mooncake.http_metadata_server  # noqa: F401
        out["http_metadata_server"] = True
    except Exception as exc:  # noqa: BLE001
        out["http_metadata_server"] = False
        out["http_metadata_server_error"] = f"{type(exc).__name__}: {exc}"
    return out


def start_engine(segment: str, metadata: str):
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    rc = engine.initialize(segment, metadata, "tcp", "")
    if rc != 0:
        emit({"error": f"TransferEngine.initialize({segment!r}, {metadata!r}, 'tcp', '') "
                       f"returned {rc}"})
        sys.exit(2)
    return engine


def register(engine, size: int):
    buf = ctypes.create_string_buffer(size)
    addr = ctypes.addressof(buf)
    rc = engine.register_memory(addr, size)
    if rc != 0:
        emit({"error": f"register_memory({addr:#x}, {size}) returned {rc}"})
        sys.exit(2)
    return buf, addr


def target(args: argparse.Namespace) -> int:
    engine = start_engine(args.segment, args.metadata)
    buf, addr = register(engine, args.size)
    emit({"ready": True, "buffer": addr, "rpc_port": engine.get_rpc_port(), "pid": os.getpid()})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "digest":
            emit({"sha256": hashlib.sha256(ctypes.string_at(addr, args.size)).hexdigest()})
        elif cmd == "quit":
            break
    del buf
    return 0


def initiator(args: argparse.Namespace) -> int:
    engine = start_engine(args.segment, args.metadata)
    buf, addr = register(engine, 2 * args.size)
    data = random.Random(args.seed).randbytes(args.size)
    ctypes.memmove(addr, data, args.size)
    remote = engine.get_first_buffer_address(args.target)
    if remote in (0, 2**64 - 1) or remote < 0:
        emit({"error": f"get_first_buffer_address({args.target!r}) returned {remote}"})
        return 2
    began = time.monotonic()
    write_rc = engine.transfer_sync_write(args.target, addr, remote, args.size)
    read_rc = engine.transfer_sync_read(args.target, addr + args.size, remote, args.size)
    back = ctypes.string_at(addr + args.size, args.size)
    emit({"write_rc": write_rc, "read_rc": read_rc, "equal": back == data,
          "sha256": hashlib.sha256(data).hexdigest(), "seconds": time.monotonic() - began})
    del buf
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peer_script")
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("attrs")
    for name in ("target", "initiator"):
        p = sub.add_parser(name)
        p.add_argument("--segment", required=True)
        p.add_argument("--metadata", required=True)
        p.add_argument("--size", type=int, default=1 << 16)
    init = sub.choices["initiator"]
    init.add_argument("--target", required=True)
    init.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.mode == "attrs":
        emit(attrs())
        return 0
    return target(args) if args.mode == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
