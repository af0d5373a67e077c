"""A listener that answers mooncake_master's own RPC (coro_rpc + struct_pack, family 0.3.13)
on behalf of a reference master, so a release's own ``mooncake.store`` client can attach to
the reference. Each coro_rpc connection holds one connection to the reference master (its
length-prefixed JSON protocol, handshaken with the client's id); every call is translated
there and back, with no state of its own beyond which segment id names which endpoint.

It lives beside the reference target, not in reference_engine: the codec is the plugin's
(``pytest_mooncake.master_rpc``), which reference_engine may not import (docs/master-wire.md).
Answer types are the literals 0.3.13.post1's master sends (``ANSWERS``).
"""

from __future__ import annotations

import socket
from typing import Any

from pytest_mooncake.master_rpc import frame, type_literal
from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc.capture import BY_ID
from pytest_mooncake.master_rpc.layouts import ERROR_CODES, Layout, by_name
from pytest_mooncake.master_rpc.listener import ConnectionListener
from reference_engine.master.protocol import MASTER_VERSION as REFERENCE_VERSION
from reference_engine.master.protocol import recv_frame, send_frame

ANSWERS = {name: type_literal.parse(bytes.fromhex(lit)) for name, lit in {
    "GetStorageConfig": "87fd800c0b04ff01",
    "FetchTasks": "8784fdfd04048989ff01800c0302ff01",
    "PutStart": "8784fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd04048989ff04"
                "800cfffd800c04040401ffff01ff01",
    "GetReplicaList": "87fd84fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd0404"
                      "8989ff04800cfffd800c04040401ffff01ff048504ff01",
}.items()}
"""Answer types 0.3.13.post1's master declares (literals it sent to our client)."""
MASTER_VERSION = "2.0.0"
"""What every release's master answers to ServiceReady (and its clients require)."""
REPLICA_STATUS = {"INITIALIZED": 1, "PROCESSING": 2, "COMPLETE": 3, "REMOVED": 4, "FAILED": 5}
CLIENT_STATUS = {"UNDEFINED": 0, "OK": 1, "NEED_REMOUNT": 2}


class _Unknown(Exception):
    """A call this gateway does not translate."""


def _uuid_text(uuid: Any) -> str:
    return f"{uuid['first']:016x}-{uuid['second']:016x}"


class CoroGateway(ConnectionListener):
    """``with CoroGateway(reference_address) as gw: gw.address`` — a coro_rpc listener."""

    def __init__(self, reference: str, layout: Layout | None = None, host: str = "127.0.0.1"):
        super().__init__(host)
        self.reference = reference
        self.layout = layout or by_name("0.3.13")
        self._segments: dict[tuple[int, int], str] = {}
        self.calls: list[str] = []

    # ------------------------------------------------------------------ one connection

    def handle(self, sock: socket.socket) -> None:
        link: _Link | None = None
        try:
            while True:
                head = _read(sock, frame.REQUEST.size)
                if head is None:
                    return
                _, _, _, _, seq, fid, length, attach = frame.REQUEST.unpack(head)
                body = _read(sock, length + attach) or b""
                method = BY_ID.get(fid, f"#{fid:08x}")
                self.calls.append(method)
                try:
                    if link is None and method != "ServiceReady":
                        link = _Link(self.reference, self._client_of(method, body[:length]))
                    answer = self._answer(method, body[:length], link)
                    out = _response(seq, 0, answer)
                except _Unknown as exc:
                    out = _response(seq, 11, sp.serialize(sp.STR, str(exc)))
                except sp.StructPackError as exc:
                    out = _response(seq, 4, sp.serialize(sp.STR, f"invalid rpc arg: {exc}"))
                sock.sendall(out)
        except OSError:
            return
        finally:
            if link is not None:
                link.close()
            sock.close()

    def _client_of(self, method: str, body: bytes) -> str:
        """The client id the first identifying call names (the reference's hello wants one)."""
        args = self._args(method, body)
        for value in (args if isinstance(args, dict) else {"a": args}).values():
            if isinstance(value, dict) and set(value) == {"first", "second"}:
                return _uuid_text(value)
        return "coro-gateway"

    def _args(self, method: str, body: bytes) -> Any:
        if method not in self.layout.calls:
            raise _Unknown(f"the coro_rpc gateway does not translate {method}")
        arg_type = sp.args_type(self.layout.calls[method].args)
        return None if arg_type is None else sp.deserialize(arg_type, body)

    def _answer(self, method: str, body: bytes, link: _Link | None) -> bytes:
        args = self._args(method, body)
        spec = self.layout.calls[method]
        answer_type = spec.answer or ANSWERS[method]
        a = args if isinstance(args, dict) and "arg0" in args else {"arg0": args}
        try:
            value = getattr(self, "_" + method)(a, link)
        except RemoteError as exc:
            value = sp.Unexpected(ERROR_CODES.get(exc.code, ERROR_CODES["INTERNAL_ERROR"]))
        return sp.serialize(answer_type, value, type_literal=True)

    # ------------------------------------------------------------------ translations

    def _ServiceReady(self, a, link):  # noqa: N802 - named as the handler
        return MASTER_VERSION

    def _GetStorageConfig(self, a, link):  # noqa: N802
        return {"f0": "", "f1": True, "f2": 0}

    def _FetchTasks(self, a, link):  # noqa: N802
        return []

    def _segment(self, seg: dict, client: str) -> dict:
        with self._lock:
            self._segments[(seg["id"]["first"], seg["id"]["second"])] = seg["te_endpoint"]
        return {"segment_name": seg["name"], "transport_endpoint": seg["te_endpoint"],
                "base": seg["base"], "capacity": seg["size"], "client_id": client,
                "is_memory_segment": True}

    def _MountSegment(self, a, link):  # noqa: N802
        client = _uuid_text(a["arg1"])
        link.call("remount_segment", {"client_id": client,
                                      "segments": [self._segment(a["arg0"], client)]})

    def _ReMountSegment(self, a, link):  # noqa: N802
        client = _uuid_text(a["arg1"])
        link.call("remount_segment", {"client_id": client,
                                      "segments": [self._segment(s, client) for s in a["arg0"]]})

    def _UnmountSegment(self, a, link):  # noqa: N802
        seg = a["arg0"]
        with self._lock:
            endpoint = self._segments.get((seg["first"], seg["second"]))
        if endpoint is None:
            raise RemoteError("SEGMENT_NOT_FOUND", "unknown segment id")
        link.call("unmount_segment", {"client_id": _uuid_text(a["arg1"]), "endpoint": endpoint})

    def _Ping(self, a, link):  # noqa: N802
        got = link.call("ping", {"client_id": _uuid_text(a["arg0"])})
        return {"view_version_id": int(got.get("view_version") or 0),
                "client_status": CLIENT_STATUS.get(str(got.get("client_status")).upper(), 1)}

    @staticmethod
    def _descriptors(replicas: list[dict]) -> list[dict]:
        out = []
        for r in replicas:
            endpoint, address, size = r["descriptors"][0]
            out.append({"f0": r["id"], "f1": (0, {"f0": {"f0": size, "f1": address,
                                                          "f2": "tcp", "f3": endpoint}}),
                        "f2": REPLICA_STATUS.get(str(r["status"]).upper(), 2)})
        return out

    def _PutStart(self, a, link):  # noqa: N802
        got = link.call("put_start", {"client_id": _uuid_text(a["arg0"]), "key": a["arg1"],
                                      "size": a["arg2"],
                                      "replica_num": a["arg3"]["replica_num"]})
        return self._descriptors(got["replicas"])

    def _PutEnd(self, a, link):  # noqa: N802
        link.call("put_end", {"client_id": _uuid_text(a["arg0"]), "key": a["arg1"]["key"]})

    def _PutRevoke(self, a, link):  # noqa: N802
        link.call("put_revoke", {"client_id": _uuid_text(a["arg0"]), "key": a["arg1"]})

    def _GetReplicaList(self, a, link):  # noqa: N802
        got = link.call("get_replica_list", {"key": a["arg0"]})
        return {"f0": self._descriptors(got["replicas"]), "f1": int(got["lease_ttl_ms"]),
                "f2": None}

    def _ExistKey(self, a, link):  # noqa: N802
        return bool(link.call("exists", {"key": a["arg0"]})["exists"])

    def _Remove(self, a, link):  # noqa: N802
        link.call("remove", {"key": a["arg0"], "force": bool(a["arg1"])})


class RemoteError(Exception):
    def __init__(self, code: str, message: str):
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class _Link:
    """One handshaken connection to the reference master's JSON protocol."""

    def __init__(self, address: str, client_id: str):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(10)
        send_frame(self.sock, {"op": "hello", "version": REFERENCE_VERSION,
                               "client_id": client_id})
        reply = recv_frame(self.sock)
        if not reply.get("ok"):
            raise RemoteError(str(reply.get("error")), str(reply.get("message")))
        self._next = 1

    def call(self, op: str, args: dict) -> Any:
        rid, self._next = self._next, self._next + 1
        send_frame(self.sock, {"id": rid, "op": op, "args": args})
        reply = recv_frame(self.sock)
        if reply.get("ok"):
            return reply.get("result") or {}
        raise RemoteError(str(reply.get("error")), str(reply.get("message", "")))

    def close(self) -> None:
        self.sock.close()


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _response(seq: int, err: int, body: bytes) -> bytes:
    return frame.RESPONSE.pack(frame.MAGIC, 0, err, 0, seq, len(body), 0) + body
