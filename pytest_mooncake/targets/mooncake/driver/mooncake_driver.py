"""Driver process for a real Mooncake build: run with the target's python, never imported.

It imports only the standard library and the Mooncake wheel (the target's python may have no
pytest_mooncake), drives ``mooncake.engine.TransferEngine`` or a ``mooncake.store`` client, and
takes commands from the test process over a loopback control socket: one JSON object per line,
one JSON reply per line. When ready it writes ``{"control_port": ..., ...}`` to ``--ready-file``.

    python driver.py probe
    python driver.py engine --segment NAME --metadata URI --ready-file F [--buffer-size N]
                            [--address ADDR | --avoid ADDR] [--protocol tcp|rdma] [--rpc-port P]
                            [--devices mlx5_0,mlx5_1]
    python driver.py store --hostname H:P --metadata URI --master ADDR --ready-file F
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import gc
import json
import mmap
import os
import socket
import sys
import threading
import traceback

PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
MAP_PRIVATE_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
MAP_FIXED_NOREPLACE = 0x100000
MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


RPC_PORT_DRAWS = 40
"""Starts of a TransferEngine to get the RPC port ``--rpc-port`` asks for (1 in 3 each)."""


class CommandError(Exception):
    """A command the driver refuses (bad arguments); reported, never fatal."""


def map_buffer(size: int, address: int = 0, avoid: int = 0) -> int:
    """Anonymous memory of ``size`` bytes; exactly at ``address`` when given (MAP_FIXED_NOREPLACE),
    and never at ``avoid`` (so a restart that should move addresses does)."""
    flags = MAP_PRIVATE_ANON | (MAP_FIXED_NOREPLACE if address else 0)
    got = _libc.mmap(address or None, size, PROT_RW, flags, -1, 0)
    if got in (None, MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes at {address:#x} failed: {os.strerror(err)}")
    if address and got != address:
        _libc.munmap(got, size)
        raise OSError(f"mmap placed the buffer at {got:#x}, not at the requested {address:#x}")
    if avoid and got == avoid:
        other = map_buffer(size)
        _libc.munmap(got, size)
        got = other
    return got


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


# ------------------------------------------------------------------------------------- probe


def probe() -> dict:
    """What this Mooncake build offers: import paths, Python API surface, binaries."""
    import mooncake

    facts: dict = {"python": sys.executable, "package_dir": os.path.dirname(mooncake.__file__)}
    try:
        from mooncake.engine import TransferEngine

        facts["engine_methods"] = sorted(n for n in dir(TransferEngine) if not n.startswith("_"))
    except Exception as exc:  # noqa: BLE001 (report, do not crash)
        facts["engine_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from mooncake.store import MooncakeDistributedStore

        facts["store_methods"] = sorted(
            n for n in dir(MooncakeDistributedStore) if not n.startswith("_"))
    except Exception as exc:  # noqa: BLE001
        facts["store_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import mooncake.http_metadata_server  # noqa: F401

        facts["http_metadata_server"] = True
    except Exception as exc:  # noqa: BLE001
        facts["http_metadata_server"] = False
        facts["http_metadata_server_error"] = f"{type(exc).__name__}: {exc}"
    pkg = facts["package_dir"]
    facts["binaries"] = {
        name: os.path.join(pkg, name) for name in ("mooncake_master", "transfer_engine_bench")
        if os.access(os.path.join(pkg, name), os.X_OK)
    }
    return facts


# ------------------------------------------------------------------------------------- engine


class EngineDriver:
    """One real TransferEngine with one registered buffer and an unregistered staging area."""

    def __init__(self, args: argparse.Namespace):
        self.segment = args.segment
        self.protocol = args.protocol
        self.size = args.buffer_size
        # mapped before the engine starts its threads: their stacks (and the libraries it
        # loads) are placed by ASLR and once took a restarted engine's kept address
        # (mmap ... File exists, at --address)
        self.addr = map_buffer(self.size, args.address, args.avoid)
        self.engine = self._initialize(args)
        if args.metadata == "P2PHANDSHAKE":  # the segment is named by the RPC address
            self.segment = f"{args.segment}:{self.engine.get_rpc_port()}"
        rc = self.engine.register_memory(self.addr, self.size)
        if rc != 0:
            raise SystemExit(f"TransferEngine.register_memory({self.addr:#x}, {self.size}) "
                             f"returned {rc}")
        self.more: list[list[int]] = []
        """Buffers registered after the start (``register``), in order."""
        self.staging_size = args.staging_size
        self.staging = map_buffer(self.staging_size)
        if self.protocol != "tcp":  # RDMA moves bytes only from and to registered memory
            rc = self.engine.register_memory(self.staging, self.staging_size)
            if rc != 0:
                raise SystemExit(f"TransferEngine.register_memory({self.staging:#x}, "
                                 f"{self.staging_size}) (staging) returned {rc}")
        self.batches: dict[int, int] = {}  # transfer id -> batch id, until it ended
        self.ended: dict[int, str] = {}  # transfer id -> "completed" / "failed"
        self.next_transfer = 0
        self.counts = {"writes_ok": 0, "writes_failed": 0, "reads_ok": 0, "reads_failed": 0,
                       "lookups_ok": 0, "lookups_failed": 0}

    @staticmethod
    def _initialize(args: argparse.Namespace):
        """An initialised TransferEngine; with ``--rpc-port`` one whose RPC port is that one
        (in P2P mode Mooncake draws it from MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, which the caller
        narrows to a few ports: an engine that drew another one is dropped and made again)."""
        from mooncake.engine import TransferEngine

        call = (f"TransferEngine.initialize({args.segment!r}, {args.metadata!r}, "
                f"{args.protocol!r}, {args.devices!r})")
        drawn = []
        for _ in range(RPC_PORT_DRAWS):
            engine = TransferEngine()
            rc = engine.initialize(args.segment, args.metadata, args.protocol, args.devices)
            if rc != 0:
                raise SystemExit(f"{call} returned {rc}")
            if not args.rpc_port or engine.get_rpc_port() == args.rpc_port:
                return engine
            drawn.append(engine.get_rpc_port())
            del engine
            gc.collect()
        raise SystemExit(f"{call}: the RPC port was never {args.rpc_port} in {RPC_PORT_DRAWS} "
                         f"starts (drew {sorted(set(drawn))})")

    def close(self) -> None:
        """Destroy the engine now (its destructor unpublishes the segment), not whenever the
        interpreter's shutdown gets to it: a session thread still holding ``self`` would
        otherwise keep it alive past exit, and the keys would stay behind as after SIGKILL."""
        self.engine = None
        gc.collect()

    def info(self) -> dict:
        return {"segment": self.segment, "pid": os.getpid(), "rpc_port": self.engine.get_rpc_port(),
                "buffers": [[self.addr, self.size], *self.more],
                "staging": [self.staging, self.staging_size],
                "protocol": self.protocol}

    def submit(self, peer: str, op: str, offset: int, length: int, local_offset: int) -> dict:
        """An asynchronous transfer between this engine's buffer at ``local_offset`` and the
        peer's first buffer at ``offset``: one batch of one request; ``status`` follows it."""
        self._check_local(local_offset, length)
        base = self.peer_base(peer)
        call = {"write": self.engine.batch_transfer_async_write,
                "read": self.engine.batch_transfer_async_read}.get(op)
        if call is None:
            raise CommandError(f"op must be write or read, got {op!r}")
        batch = call(peer, [self.addr + local_offset], [base + offset], [length])
        if batch in (0, -1) or batch < 0:
            return {"ok": False, "error": f"batch_transfer_async_{op}({peer!r}, {length} bytes) "
                                          f"returned {batch}"}
        self.next_transfer += 1
        self.batches[self.next_transfer] = batch
        return {"ok": True, "transfer": self.next_transfer,
                "local": [self.addr + local_offset, length], "remote": base + offset}

    def status(self, transfers: list[int]) -> dict:
        """waiting / completed / failed per transfer id (``transfer_check_status``, which frees
        a batch once it ended, as an application does)."""
        out = {}
        for t in transfers:
            t = int(t)
            if t in self.ended:
                out[str(t)] = self.ended[t]
                continue
            if t not in self.batches:
                raise CommandError(f"no transfer {t}")
            rc = self.engine.transfer_check_status(self.batches[t])
            if rc == 0:
                out[str(t)] = "waiting"
                continue
            self.ended[t] = "completed" if rc == 1 else "failed"
            del self.batches[t]
            out[str(t)] = self.ended[t]
        return {"ok": True, "status": out}

    def register_extra(self, size: int) -> dict:
        """Register one more buffer: the engine republishes its descriptor, same process."""
        return self.register(size)

    def register(self, length: int) -> dict:
        """Map and register another buffer (the engine republishes its descriptor)."""
        addr = map_buffer(length)
        rc = self.engine.register_memory(addr, length)
        if rc != 0:
            _libc.munmap(addr, length)
            return {"ok": False, "error": f"register_memory({addr:#x}, {length}) returned {rc}"}
        self.more.append([addr, length])
        return {"ok": True, "address": addr, "length": length}

    def _check_local(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise CommandError(f"range [{offset}, {offset + length}) is outside the local buffer "
                               f"of {self.size} bytes")

    def _stage(self, length: int) -> None:
        if length > self.staging_size:
            raise CommandError(f"{length} bytes exceed the staging area of {self.staging_size}")

    def peer_base(self, peer: str) -> int:
        base = self.engine.get_first_buffer_address(peer)
        if base in (0, 2**64 - 1) or base < 0:
            raise CommandError(f"get_first_buffer_address({peer!r}) returned {base} "
                               f"(segment not found or has no buffer)")
        return base

    def lookup(self, peer: str) -> dict:
        try:
            base = self.peer_base(peer)
        except CommandError as exc:
            self.counts["lookups_failed"] += 1
            return {"ok": False, "error": str(exc)}
        self.counts["lookups_ok"] += 1
        return {"ok": True, "first_buffer_address": base}

    def write_at(self, peer: str, address: int, data: bytes) -> dict:
        self._stage(len(data))
        ctypes.memmove(self.staging, data, len(data))
        rc = self.engine.transfer_sync_write(peer, self.staging, address, len(data))
        key = "writes_ok" if rc == 0 else "writes_failed"
        self.counts[key] += 1
        if rc != 0:
            return {"ok": False, "error": f"transfer_sync_write to {peer!r} at {address:#x} "
                                          f"({len(data)} bytes) returned {rc}"}
        return {"ok": True}

    def read_at(self, peer: str, address: int, length: int) -> dict:
        self._stage(length)
        rc = self.engine.transfer_sync_read(peer, self.staging, address, length)
        self.counts["reads_ok" if rc == 0 else "reads_failed"] += 1
        if rc != 0:
            return {"ok": False, "error": f"transfer_sync_read from {peer!r} at {address:#x} "
                                          f"({length} bytes) returned {rc}"}
        return {"ok": True, "data": _b64(ctypes.string_at(self.staging, length))}

    def handle(self, cmd: dict) -> dict:
        op = cmd.get("op")
        if op == "info":
            return {"ok": True, **self.info()}
        if op == "stats":
            return {"ok": True, "counts": dict(self.counts)}
        if op == "register":
            return self.register(int(cmd["length"]))
        if op == "lookup":
            return self.lookup(str(cmd["peer"]))
        if op in ("write", "read"):
            try:
                base = self.peer_base(str(cmd["peer"]))
            except CommandError as exc:
                self.counts["writes_failed" if op == "write" else "reads_failed"] += 1
                return {"ok": False, "error": str(exc)}
            address = base + int(cmd["offset"])
            if op == "write":
                return self.write_at(str(cmd["peer"]), address, _unb64(cmd["data"]))
            return self.read_at(str(cmd["peer"]), address, int(cmd["length"]))
        if op == "write_at":
            return self.write_at(str(cmd["peer"]), int(cmd["address"]), _unb64(cmd["data"]))
        if op == "read_at":
            return self.read_at(str(cmd["peer"]), int(cmd["address"]), int(cmd["length"]))
        if op == "submit":
            return self.submit(str(cmd["peer"]), str(cmd.get("kind", "write")),
                               int(cmd["offset"]), int(cmd["length"]),
                               int(cmd.get("local_offset", 0)))
        if op == "status":
            return self.status(list(cmd["transfers"]))
        if op == "register_extra":
            return self.register_extra(int(cmd["size"]))
        if op == "peek":
            offset, length = int(cmd["offset"]), int(cmd["length"])
            self._check_local(offset, length)
            return {"ok": True, "data": _b64(ctypes.string_at(self.addr + offset, length))}
        if op == "poke":
            data = _unb64(cmd["data"])
            self._check_local(int(cmd["offset"]), len(data))
            ctypes.memmove(self.addr + int(cmd["offset"]), data, len(data))
            return {"ok": True}
        raise CommandError(f"unknown op {op!r}")


# ------------------------------------------------------------------------------------- store


class StoreDriver:
    """One real ``mooncake.store`` client (it mounts a segment and talks to the master)."""

    def __init__(self, args: argparse.Namespace):
        from mooncake.store import MooncakeDistributedStore

        self.store = MooncakeDistributedStore()
        rc = self.store.setup(args.hostname, args.metadata, args.segment_size, args.buffer_size,
                              "tcp", "", args.master)
        if rc != 0:
            raise SystemExit(f"MooncakeDistributedStore.setup({args.hostname!r}, "
                             f"{args.metadata!r}, ..., master={args.master!r}) returned {rc}")

    def info(self) -> dict:
        return {"pid": os.getpid(), "hostname": self.store.get_hostname()}

    def handle(self, cmd: dict) -> dict:
        op = cmd.get("op")
        if op == "info":
            return {"ok": True, **self.info()}
        if op == "put":
            rc = self.store.put(str(cmd["key"]), _unb64(cmd["data"]))
            return {"ok": rc == 0, "rc": rc}
        if op == "get":
            data = self.store.get(str(cmd["key"]))
            return {"ok": True, "data": _b64(bytes(data)), "found": len(data) > 0}
        if op == "exists":
            rc = self.store.is_exist(str(cmd["key"]))
            return {"ok": rc >= 0, "rc": rc, "exists": rc == 1}
        if op == "remove":
            rc = self.store.remove(str(cmd["key"]), bool(cmd.get("force", False)))
            return {"ok": rc == 0, "rc": rc}
        if op == "health":
            return {"ok": True, "rc": self.store.health_check()}
        raise CommandError(f"unknown op {op!r}")


# ------------------------------------------------------------------------------------- serve


def serve(driver, ready_file: str, host: str = "127.0.0.1", port: int = 0) -> None:
    """Answer commands until ``stop``: one thread per connection (the test process and a
    cluster manifest's attachment may both hold one), one command at a time."""
    listener = socket.create_server((host, port))
    listener.settimeout(0.2)
    info = {"control_port": listener.getsockname()[1], **driver.info()}
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, ready_file)
    print(f"driver ready: {json.dumps(info)}", flush=True)
    lock = threading.Lock()
    stopping = threading.Event()
    while not stopping.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        threading.Thread(target=_session, args=(driver, conn, lock, stopping), daemon=True).start()
    listener.close()
    print("driver stopping on request", flush=True)


def _session(driver, conn: socket.socket, lock: threading.Lock, stopping: threading.Event) -> None:
    with conn, conn.makefile("rwb") as stream:
        for line in stream:
            try:
                cmd = json.loads(line)
                if not isinstance(cmd, dict):
                    raise CommandError("a command is a JSON object")
                if cmd.get("op") == "stop":
                    stream.write(b'{"ok": true}\n')
                    stream.flush()
                    stopping.set()
                    return
                with lock:
                    reply = driver.handle(cmd)
            except (CommandError, KeyError, ValueError, TypeError) as exc:
                reply = {"ok": False, "error": f"bad command: {type(exc).__name__}: {exc}"}
            except Exception as exc:  # noqa: BLE001 (report to the parent, keep serving)
                traceback.print_exc()
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            stream.write(json.dumps(reply).encode() + b"\n")
            stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mooncake-driver")
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("probe")
    eng = sub.add_parser("engine")
    eng.add_argument("--segment", required=True)
    eng.add_argument("--metadata", required=True)
    eng.add_argument("--ready-file", required=True)
    eng.add_argument("--buffer-size", type=int, default=1 << 20)
    eng.add_argument("--staging-size", type=int, default=4 << 20)
    eng.add_argument("--address", type=lambda s: int(s, 0), default=0)
    eng.add_argument("--avoid", type=lambda s: int(s, 0), default=0)
    eng.add_argument("--protocol", default="tcp", choices=["tcp", "rdma"])
    eng.add_argument("--devices", default="", help="RDMA devices to use (comma-separated)")
    eng.add_argument("--rpc-port", type=int, default=0,
                     help="P2PHANDSHAKE: the RPC port the engine must listen on (0: any)")
    for p in (eng, sto := sub.add_parser("store")):
        p.add_argument("--control-host", default="127.0.0.1")
        p.add_argument("--control-port", type=int, default=0)
    sto.add_argument("--hostname", required=True)
    sto.add_argument("--metadata", required=True)
    sto.add_argument("--master", required=True)
    sto.add_argument("--ready-file", required=True)
    sto.add_argument("--segment-size", type=int, default=16 << 20)
    sto.add_argument("--buffer-size", type=int, default=16 << 20)
    args = parser.parse_args(argv)
    if args.mode == "probe":
        print(json.dumps(probe()))
        return 0
    driver = EngineDriver(args) if args.mode == "engine" else StoreDriver(args)
    serve(driver, args.ready_file, args.control_host, args.control_port)
    if isinstance(driver, EngineDriver):
        driver.close()
        print("driver: engine destroyed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
