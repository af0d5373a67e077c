"""A listener that answers mooncake_master's own RPC (coro_rpc + struct_pack) on behalf of a
reference master, so a release's own ``mooncake.store`` client, and our wire client speaking
any release family, can attach to the reference. Each coro_rpc connection holds one connection
to the reference master (its length-prefixed JSON protocol, handshaken with the client's id
and version); every call is translated there and back, with no state of its own beyond which
segment id names which endpoint.

Which family a call's arguments are in is read from their struct_pack type hash (each family
hashes differently where its types differ), so one listener serves every family alike. The
client's version: a release's client announces none (the Mooncake wire has no place for one),
so the reference master is told its own version; a client that sends a version string as
ServiceReady's argument is judged on it by the reference master, as its JSON-RPC clients are
(the rfc profile refuses another major at the handshake, the legacy one refuses only writes),
and once refused, every call on that connection is answered with the refusal's ErrorCode.

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
from pytest_mooncake.master_rpc.layouts import ERROR_CODES, LAYOUTS, Layout, by_name
from pytest_mooncake.master_rpc.listener import ConnectionListener
from reference_engine.master.protocol import MASTER_VERSION as REFERENCE_VERSION
from reference_engine.master.protocol import recv_frame, send_frame


def _types(literals: dict[str, str]) -> dict[str, sp.SpType]:
    return {name: type_literal.parse(bytes.fromhex(lit)) for name, lit in literals.items()}


_ANSWERS_0_3_13 = _types({
    "GetStorageConfig": "87fd800c0b04ff01",
    "FetchTasks": "8784fdfd04048989ff01800c0302ff01",
    "PutStart": "8784fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd04048989ff04"
                "800cfffd800c04040401ffff01ff01",
    "GetReplicaList": "87fd84fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd0404"
                      "8989ff04800cfffd800c04040401ffff01ff048504ff01",
})
_ANSWERS_0_3_11 = {**_ANSWERS_0_3_13, **_types({
    "PutStart": "8784fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd04048989ff04"
                "800cffff01ff01",
    "GetReplicaList": "87fd84fd0486fdfd0404800c800cfffffdfd0404800c800cfffffd800c04fffdfd0404"
                      "8989ff04800cffff01ff04ff01",
})}
_ANSWERS_0_3_10 = {**_ANSWERS_0_3_13, **_types({
    "PutStart": "8784fd0486fdfd0404800c800cfffffd800c04fffdfd04048989ff04800cffff01ff01",
    "GetReplicaList": "87fd84fd0486fdfd0404800c800cfffffd800c04fffdfd04048989ff04800cffff01ff04"
                      "ff01",
})}
ANSWERS = {"0.3.10": _ANSWERS_0_3_10, "0.3.11": _ANSWERS_0_3_11, "0.3.12": _ANSWERS_0_3_11,
           "0.3.13": _ANSWERS_0_3_13, "0.3.14": _ANSWERS_0_3_13}
"""Per family, the answer types its masters declare (literals each release's master sent to
our client, ``docs/master-wire.md``): the replica descriptor's variant has 3 alternatives in
0.3.10, 4 in 0.3.11/0.3.12, 5 from 0.3.13, whose GetReplicaList also answers a checksum.
0.3.14's masters add a compatible section its client does not need."""
MASTER_VERSION = "2.0.0"
"""What every release's master answers to ServiceReady (and its clients require)."""
REPLICA_STATUS = {"INITIALIZED": 1, "PROCESSING": 2, "COMPLETE": 3, "REMOVED": 4, "FAILED": 5}
CLIENT_STATUS = {"UNDEFINED": 0, "OK": 1, "NEED_REMOUNT": 2}


class _Unknown(Exception):
    """A call this gateway does not translate."""


def _uuid_text(uuid: Any) -> str:
    return f"{uuid['first']:016x}-{uuid['second']:016x}"


class CoroGateway(ConnectionListener):
    """``with CoroGateway(reference_address) as gw: gw.address`` — a coro_rpc listener.

    How a client's version reaches a reference master through this listener: as the string
    argument of ServiceReady (which no release's handler takes). Refused, the call answers the
    reference master's ErrorCode; accepted, the reference master's own protocol version (not
    "2.0.0"), so a prober tells a listener that read the version from one that ignored it."""

    def __init__(self, reference: str, layout: Layout | None = None, host: str = "127.0.0.1"):
        super().__init__(host)
        self.reference = reference
        self.layout = layout or by_name("0.3.13")
        self._segments: dict[tuple[int, int], str] = {}
        self.last_families = [layout.name for layout in LAYOUTS]
        """The family the last connection that told one apart fits: where a connection's
        calls so far fit several (a release's client opens more than one connection, and
        0.3.10's and 0.3.11's GetReplicaList arguments hash alike), it is answered in that
        one's types. Clients of two such families on one master at once may be answered in
        the other's types on a connection that has not yet sent a PutStart."""
        self.calls: list[str] = []

    # ------------------------------------------------------------------ one connection

    def handle(self, sock: socket.socket) -> None:
        session = _Session()
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
                    out = _response(seq, 0, self._call(session, method, body[:length]))
                except _Unknown as exc:
                    out = _response(seq, 11, sp.serialize(sp.STR, str(exc)))
                except sp.StructPackError as exc:
                    out = _response(seq, 4, sp.serialize(sp.STR, f"invalid rpc arg: {exc}"))
                sock.sendall(out)
        except OSError:
            return
        finally:
            session.close()
            sock.close()

    def _call(self, session: _Session, method: str, body: bytes) -> bytes:
        if method not in self.layout.calls:
            raise _Unknown(f"the coro_rpc gateway does not translate {method}")
        session.narrow(self._fits(method, body))
        if len(session.families) == 1:
            self.last_families = session.families
        family = ([f for f in session.families if f in self.last_families]
                  or session.families)[-1]
        answer_type = self.layout.calls[method].answer or ANSWERS[family][method]
        if method == "ServiceReady" and body:
            session.close()
            session.link, session.refused = self._versioned_link(body)
        if session.refused is not None:
            # every call of a refused connection answers the refusal (reads, writes alike)
            return sp.serialize(answer_type, sp.Unexpected(session.refused), type_literal=True)
        if method == "ServiceReady" and body:
            # judged and accepted: answer the version it was judged against
            return sp.serialize(answer_type, session.link.master_version, type_literal=True)
        args = self._args(method, body, session.families)
        if session.link is None and method != "ServiceReady":
            session.link = _Link(self.reference, self._client_of(args))
        a = args if isinstance(args, dict) and "arg0" in args else {"arg0": args}
        try:
            value = getattr(self, "_" + method)(a, session.link)
        except RemoteError as exc:
            if exc.code == "INVALID_RPC_ARGUMENTS":  # the legacy profile's 0.3.13 refusal
                raise sp.StructPackError(exc.message) from None
            value = sp.Unexpected(ERROR_CODES.get(exc.code, ERROR_CODES["INTERNAL_ERROR"]))
        return sp.serialize(answer_type, value, type_literal=True)

    def _versioned_link(self, body: bytes) -> tuple[_Link | None, int | None]:
        """A link handshaken with the version a ServiceReady carries, or the refusal's code."""
        version = sp.deserialize(sp.STR, body)
        try:
            return _Link(self.reference, "coro-gateway", version), None
        except RemoteError as exc:
            return None, ERROR_CODES.get(exc.code, ERROR_CODES["INVALID_VERSION"])

    @staticmethod
    def _client_of(args: Any) -> str:
        """The client id the first identifying call names (the reference's hello wants one)."""
        for value in (args if isinstance(args, dict) else {"a": args}).values():
            if isinstance(value, dict) and set(value) == {"first", "second"}:
                return _uuid_text(value)
        return "coro-gateway"

    @staticmethod
    def _fits(method: str, body: bytes) -> list[str]:
        """The families whose argument type for ``method`` hashes as ``body``'s, oldest
        first (every family for a call without arguments)."""
        if method == "ServiceReady" or not body:
            return [layout.name for layout in LAYOUTS]
        seen = sp.read_header(body).hash
        return [layout.name for layout in LAYOUTS
                if sp.types_code(sp.args_type(layout.calls[method].args)) == seen]

    @staticmethod
    def _args(method: str, body: bytes, families: list[str]) -> Any:
        """The arguments, read with the newest family the connection's calls fit."""
        if method == "ServiceReady" or not body:
            return None
        failed: sp.StructPackError | None = None
        for family in reversed(families):
            try:
                return sp.deserialize(sp.args_type(by_name(family).calls[method].args), body)
            except sp.StructPackError as exc:
                failed = exc
        raise failed or sp.StructPackError(f"{method}: arguments of no known family")

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
        key = a["arg1"]["key"] if isinstance(a["arg1"], dict) else a["arg1"]
        link.call("put_end", {"client_id": _uuid_text(a["arg0"]), "key": key})

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


class _Session:
    """One coro_rpc connection: its link to the reference master, the refusal of the version
    it offered (an ErrorCode), and the families all its calls' arguments fit so far (a
    client's first calls may fit several: 0.3.10 and 0.3.11 mount the same Segment)."""

    def __init__(self):
        self.link: _Link | None = None
        self.refused: int | None = None
        self.families = [layout.name for layout in LAYOUTS]

    def narrow(self, fits: list[str]) -> None:
        """Keep the families this call fits too (a call fitting none of them starts over)."""
        if not fits:
            raise sp.StructPackError("arguments of no known family (type hash unknown)")
        self.families = [f for f in self.families if f in fits] or fits

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None


class RemoteError(Exception):
    def __init__(self, code: str, message: str):
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class _Link:
    """One handshaken connection to the reference master's JSON protocol."""

    def __init__(self, address: str, client_id: str, version: str = REFERENCE_VERSION):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(10)
        send_frame(self.sock, {"op": "hello", "version": version, "client_id": client_id})
        reply = recv_frame(self.sock)
        if not reply.get("ok"):
            self.sock.close()
            raise RemoteError(str(reply.get("error")), str(reply.get("message")))
        self.master_version = str((reply.get("result") or {}).get("version", ""))
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
