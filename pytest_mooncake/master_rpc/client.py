"""A client of mooncake_master's own RPC (coro_rpc + struct_pack over TCP), with deadlines the
caller sets: every call returns within ``timeout`` seconds or raises ``RpcTimeout``, so a test
can tell "the master never answers" from "a client never gives up".

The release's own client announces no version to the master: ``MasterClient::Connect`` calls
``ServiceReady()``, which takes no argument and answers the master's version string, and the
client compares it with its own (mooncake-store/src/master_client.cpp). ``announce`` models
that handshake from the client's side; the master is never told a client version.
"""

from __future__ import annotations

import itertools
import socket
import time
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.master_rpc import frame, type_literal
from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc.layouts import Layout


class RpcError(Exception):
    """The master answered with a coro_rpc error (no such function, arguments it could not
    deserialize, …): ``code`` is coro_rpc's errc, ``message`` its text."""

    def __init__(self, method: str, code: int, message: str):
        self.method, self.code, self.message = method, code, message
        name = frame.RPC_ERRORS.get(code, "?")
        super().__init__(f"{method}: coro_rpc error {code} ({name}): {message}")


class RpcTimeout(TimeoutError):
    """No complete answer within the caller's deadline (connection open, nothing read)."""


class RpcClosed(ConnectionError):
    """The master closed or reset the connection before answering."""


@dataclass(frozen=True)
class Answer:
    """One decoded answer: ``value`` (an ``sp.Unexpected`` for a Mooncake ErrorCode), the type
    literal the master sent with it (None when its build sends none) and whether that literal
    is the one the layout declares (None when nothing was declared or sent)."""

    method: str
    value: Any
    literal: bytes | None
    matches_layout: bool | None
    raw: bytes

    @property
    def ok(self) -> bool:
        return not isinstance(self.value, sp.Unexpected)

    @property
    def error(self) -> Any:
        return self.value.error if isinstance(self.value, sp.Unexpected) else None


class MasterRpcClient:
    """One TCP connection to one master. Not thread-safe: one call at a time."""

    def __init__(self, address: str, layout: Layout, timeout: float = 5.0,
                 type_literal: bool = False):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"master address {address!r} is not HOST:PORT")
        self.address, self.layout, self.timeout = address, layout, timeout
        self.type_literal = type_literal
        """Send type literals with the arguments, as the releases' own clients do."""
        self._host, self._port = host, int(port)
        self._sock: socket.socket | None = None
        self._seq = itertools.count(1)

    # ------------------------------------------------------------------ transport

    def connect(self, timeout: float | None = None) -> None:
        if self._sock is None:
            try:
                self._sock = socket.create_connection((self._host, self._port),
                                                      timeout=timeout or self.timeout)
            except TimeoutError:
                raise RpcTimeout(f"connecting to {self.address}: no answer in "
                                 f"{timeout or self.timeout:g}s") from None
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> MasterRpcClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, n: int, deadline: float, method: str) -> bytes:
        data = bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RpcTimeout(f"{method} to {self.address}: {len(data)} of {n} bytes after "
                                 f"the {self.timeout:g}s deadline")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(n - len(data))
            except TimeoutError:
                continue
            except OSError as exc:
                self.close()
                raise RpcClosed(f"{method} to {self.address}: {exc}") from None
            if not chunk:
                self.close()
                raise RpcClosed(f"{method} to {self.address}: connection closed after "
                                f"{len(data)} of {n} bytes")
            data += chunk
        return bytes(data)

    def exchange(self, method: str, body: bytes, timeout: float | None = None) -> bytes:
        """Send one request frame and return its answer body (``RpcError`` on a coro_rpc
        error, ``RpcTimeout`` past the deadline: the connection is then closed, as a late
        answer would be mistaken for the next call's)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        self.connect(timeout or self.timeout)
        seq = next(self._seq)
        try:
            self._sock.sendall(frame.request(seq, method, body))
        except OSError as exc:
            self.close()
            raise RpcClosed(f"{method} to {self.address}: send failed: {exc}") from None
        try:
            head = frame.ResponseHead.parse(self._read(frame.RESPONSE.size, deadline, method))
            payload = self._read(head.length + head.attach_length, deadline, method)
        except RpcTimeout:
            self.close()
            raise
        if head.seq != seq:
            self.close()
            raise frame.FrameError(f"{method}: answer to request {head.seq}, sent {seq}")
        payload = payload[:head.length]
        if head.err_code:
            raise RpcError(method, *self._rpc_error(head.err_code, payload))
        return payload

    @staticmethod
    def _rpc_error(code: int, payload: bytes) -> tuple[int, str]:
        try:
            if code == 255:
                pair = sp.deserialize(sp.args_type((sp.U16, sp.STR)), payload)
                return pair["arg0"], pair["arg1"]
            return code, sp.deserialize(sp.STR, payload)
        except sp.StructPackError:
            return code, f"(undecodable message {payload.hex()})"

    # ------------------------------------------------------------------ calls

    def call(self, method: str, *args: Any, timeout: float | None = None) -> Answer:
        """Call ``method`` with ``args`` in this client's layout."""
        spec = self.layout.call(method)
        arg_type = sp.args_type(spec.args)
        if len(args) != len(spec.args):
            raise TypeError(f"{method} takes {len(spec.args)} arguments in layout "
                            f"{self.layout.name}, got {len(args)}")
        if arg_type is None:
            body = b""
        else:
            body = sp.serialize(arg_type, args[0] if len(args) == 1 else list(args),
                                self.type_literal)
        raw = self.exchange(method, body, timeout)
        return decode_answer(method, spec.answer, raw)

    def _tenant(self, tenant: str) -> tuple:
        return (tenant,) if self.layout.tenant else ()

    def service_ready(self, **kw) -> Answer:
        return self.call("ServiceReady", **kw)

    def ping(self, client_id: tuple[int, int], **kw) -> Answer:
        return self.call("Ping", client_id, **kw)

    def exist_key(self, key: str, tenant: str = "default", **kw) -> Answer:
        return self.call("ExistKey", key, *self._tenant(tenant), **kw)

    def get_replica_list(self, key: str, tenant: str = "default", **kw) -> Answer:
        return self.call("GetReplicaList", key, *self._tenant(tenant), **kw)

    def put_start(self, client_id: tuple[int, int], key: str, size: int,
                  config: dict | None = None, tenant: str = "default", **kw) -> Answer:
        return self.call("PutStart", client_id, key, size,
                         config or self.layout.default_config(), *self._tenant(tenant), **kw)

    def put_end(self, client_id: tuple[int, int], key: str, replica_type: str = "MEMORY",
                tenant: str = "default", **kw) -> Answer:
        target = {"key": key, "object_checksum": None} if self.layout.put_end_meta else key
        return self.call("PutEnd", client_id, target, replica_type, *self._tenant(tenant), **kw)

    def put_revoke(self, client_id: tuple[int, int], key: str, replica_type: str = "MEMORY",
                   tenant: str = "default", **kw) -> Answer:
        return self.call("PutRevoke", client_id, key, replica_type, *self._tenant(tenant), **kw)

    def remove(self, key: str, force: bool = False, tenant: str = "default", **kw) -> Answer:
        return self.call("Remove", key, force, *self._tenant(tenant), **kw)

    def mount_segment(self, segment: dict, client_id: tuple[int, int], **kw) -> Answer:
        values = {"host_id": "", "protocol": "tcp", **segment}
        values = {name: values.get(name) for name, _ in self.layout.segment.fields}
        return self.call("MountSegment", values, client_id, **kw)

    def unmount_segment(self, segment_id: tuple[int, int], client_id: tuple[int, int],
                        **kw) -> Answer:
        return self.call("UnmountSegment", segment_id, client_id, **kw)

    def announce(self, version: str, **kw) -> VersionCheck:
        """What a client of ``version`` concludes from the master's ServiceReady answer, the
        way the releases' ``MasterClient::Connect`` does (exact string equality)."""
        answer = self.service_ready(**kw)
        return VersionCheck(version, answer.value if answer.ok else None, answer)


@dataclass(frozen=True)
class VersionCheck:
    client: str
    master: str | None
    answer: Answer

    @property
    def accepted(self) -> bool:
        return self.master is not None and self.master == self.client


def decode_answer(method: str, declared: sp.SpType | None, raw: bytes) -> Answer:
    """Decode ``raw`` with the declared type when the master's literal (or, without one, its
    hash) agrees, else with the type the literal describes (field names then positional)."""
    head = sp.read_header(raw)
    matches = None
    if declared is not None:
        matches = head.hash == sp.types_code(declared)
        if head.literal is not None:
            matches = matches and head.literal == declared.literal()
        if matches:
            return Answer(method, sp.deserialize(declared, raw), head.literal, True, raw)
    if head.literal is None:
        raise sp.StructPackError(f"{method}: answer type hash {head.hash:#010x} is not the "
                                 f"declared one and the master sent no literal to decode by")
    described = type_literal.parse(head.literal)
    return Answer(method, sp.deserialize(described, raw), head.literal, matches, raw)
