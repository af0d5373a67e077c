"""A process under test for the emulator's own tests: verbs calls driven over stdin/stdout.

Run by ``PeerProcess`` (verbs_peers.py) with an ``EmulatedFabric``'s environment; it loads
probe.c (built against the emulated libibverbs.so.1) with ctypes and answers one JSON request
per line: ``{"m": "post", "a": [...]}`` -> ``{"ok": result}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import sys

U32, U64, I32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int


class Peer:
    def __init__(self, probe: str):
        self.lib = ctypes.CDLL(probe)
        self.maps: list[mmap.mmap] = []

    # ---------------------------------------------------------------------------- memory

    def alloc(self, size: int) -> int:
        m = mmap.mmap(-1, size)
        self.maps.append(m)
        return ctypes.addressof(ctypes.c_char.from_buffer(m))

    def fill(self, addr: int, hex_data: str) -> None:
        data = bytes.fromhex(hex_data)
        ctypes.memmove(addr, data, len(data))

    def read(self, addr: int, length: int) -> str:
        return ctypes.string_at(addr, length).hex()

    # ----------------------------------------------------------------------------- verbs

    def devices(self) -> list[str]:
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.p_devices(buf, 4096)
        return buf.value.decode().split(",") if n > 0 else []

    def open(self, name: str) -> int:
        return self._ok(self.lib.p_open(name.encode()), f"open {name}")

    def close(self, ctx: int) -> int:
        return self.lib.p_close(ctx)

    def query_port(self, ctx: int, port: int = 1) -> dict:
        state, tbl, ll = I32(), I32(), I32()
        rc = self.lib.p_query_port(ctx, port, ctypes.byref(state), ctypes.byref(tbl),
                                   ctypes.byref(ll))
        return {"rc": rc, "state": state.value, "gid_tbl_len": tbl.value, "link_layer": ll.value}

    def query_device(self, ctx: int) -> dict:
        ports, wr = I32(), I32()
        rc = self.lib.p_query_device(ctx, ctypes.byref(ports), ctypes.byref(wr))
        return {"rc": rc, "phys_port_cnt": ports.value, "max_qp_wr": wr.value}

    def gid_ex(self, ctx: int, index: int, port: int = 1) -> dict:
        gid, kind = ctypes.create_string_buffer(16), I32()
        rc = self.lib.p_query_gid_ex(ctx, port, index, gid, ctypes.byref(kind))
        return {"rc": rc, "gid": gid.raw.hex(), "type": kind.value}

    def gid(self, ctx: int, index: int, port: int = 1) -> str:
        gid = ctypes.create_string_buffer(16)
        self._ok(self.lib.p_query_gid(ctx, port, index, gid), "query_gid", zero=True)
        return gid.raw.hex()

    def cq(self, ctx: int, cqe: int = 256, channel: bool = False) -> int:
        return self._ok(self.lib.p_cq(ctx, cqe, int(channel)), "create_cq")

    def destroy_cq(self, cq: int) -> int:
        return self.lib.p_destroy_cq(cq)

    def qp(self, ctx: int, cq: int, depth: int = 64, sge: int = 4) -> int:
        return self._ok(self.lib.p_qp(ctx, cq, depth, sge), "create_qp")

    def qpn(self, qp: int) -> int:
        self.lib.p_qpn.restype = U32
        return self.lib.p_qpn(qp)

    def qp_state(self, qp: int) -> int:
        return self.lib.p_qp_state(qp)

    def connect(self, qp: int, remote_qpn: int, dgid_hex: str, access: int = 7) -> int:
        return self.lib.p_connect(qp, U32(remote_qpn), bytes.fromhex(dgid_hex), access)

    def modify(self, qp: int, state: int, mask: int) -> int:
        return self.lib.p_modify(qp, state, mask)

    def destroy_qp(self, qp: int) -> int:
        return self.lib.p_destroy_qp(qp)

    def reg(self, ctx: int, addr: int, length: int, access: int = 7) -> list[int]:
        key = U32()
        h = self._ok(self.lib.p_reg(ctx, U64(addr), U64(length), access, ctypes.byref(key)),
                     "reg_mr")
        return [h, key.value]

    def dereg(self, mr: int) -> int:
        return self.lib.p_dereg(mr)

    def post(self, qp: int, op: str, wr_id: int, laddr: int, length: int, lkey: int,
             raddr: int, rkey: int, signaled: bool = True, count: int = 1) -> dict:
        bad = U64()
        rc = self.lib.p_post(qp, int(op == "read"), U64(wr_id), U64(laddr), U32(length),
                             U32(lkey), U64(raddr), U32(rkey), int(signaled), count,
                             ctypes.byref(bad))
        return {"rc": rc, "bad_wr": None if bad.value == 2**64 - 1 else bad.value}

    def post_gather(self, qp: int, wr_id: int, laddr: int, length: int, lkey: int, nsge: int,
                    raddr: int, rkey: int) -> int:
        return self.lib.p_post_gather(qp, U64(wr_id), U64(laddr), U32(length), U32(lkey), nsge,
                                      U64(raddr), U32(rkey))

    def poll(self, cq: int, max_entries: int = 64) -> list[dict]:
        n = min(max_entries, 64)
        wr_id, qpn, ln = (U64 * n)(), (U32 * n)(), (U32 * n)()
        status, opcode = (I32 * n)(), (I32 * n)()
        got = self.lib.p_poll(cq, n, wr_id, status, opcode, qpn, ln)
        return [{"wr_id": wr_id[i], "status": status[i], "opcode": opcode[i], "qpn": qpn[i],
                 "len": ln[i]} for i in range(got)]

    def empty_polls(self, cq: int, n: int) -> dict:
        blocked = ctypes.c_long()
        got = self.lib.p_empty_polls(cq, n, ctypes.byref(blocked))
        return {"got": got, "blocked": blocked.value}

    def notify(self, cq: int) -> int:
        return self.lib.p_notify(cq)

    def cq_event(self, cq: int, timeout_ms: int) -> int:
        return self.lib.p_cq_event(cq, timeout_ms)

    def async_event(self, ctx: int, timeout_ms: int) -> dict | None:
        kind, qpn, port = I32(), U32(), I32()
        got = self.lib.p_async(ctx, timeout_ms, ctypes.byref(kind), ctypes.byref(qpn),
                               ctypes.byref(port))
        if got < 0:
            raise OSError(-got, "ibv_get_async_event")
        return {"type": kind.value, "qpn": qpn.value, "port": port.value} if got else None

    def fork_init(self) -> int:
        return self.lib.p_fork_init()

    def fork_child(self, steps: list[list]) -> dict:
        """fork(); the child runs ``steps`` ([method, *args]) and exits through libc's exit()
        (so C destructors run, as when a real child ends); its results come back here."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            results = []
            for method, *args in steps:
                try:
                    results.append({"ok": getattr(self, method)(*args)})
                except Exception as exc:  # noqa: BLE001 (reported to the parent)
                    results.append({"error": f"{type(exc).__name__}: {exc}"})
            os.write(w, json.dumps({"pid": os.getpid(), "results": results}).encode())
            os.close(w)
            sys.stdout.flush()
            ctypes.CDLL(None).exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        out = json.loads(data or b"{}")
        out["exit"] = os.waitstatus_to_exitcode(status)
        return out

    def pid(self) -> int:
        return os.getpid()

    @staticmethod
    def _ok(rc: int, what: str, zero: bool = False) -> int:
        if rc < 0 or (zero and rc != 0):
            raise OSError(-rc if rc < 0 else rc, f"{what} failed ({rc})")
        return rc


def main() -> int:
    peer = Peer(os.environ["MC_VERBS_PROBE"])
    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = {"ok": getattr(peer, req["m"])(*req.get("a", []), **req.get("k", {}))}
        except Exception as exc:  # noqa: BLE001 (reported to the test)
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
