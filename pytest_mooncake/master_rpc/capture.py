"""Byte-for-byte check of our encoder against a release's own client: a relay between a real
``mooncake.store`` client and its master records every request frame; each call our layout
declares is decoded with our types and encoded again, and must come out as the very bytes the
release's client sent (hash, metainfo, type literal and payload)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pytest_mooncake.master_rpc import frame
from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc.layouts import Layout
from pytest_mooncake.master_rpc.listener import ConnectionListener

KNOWN_METHODS = (
    "ServiceReady", "Ping", "ExistKey", "BatchExistKey", "GetReplicaList",
    "BatchGetReplicaList", "GetReplicaListByRegex", "PutStart", "BatchPutStart", "PutEnd",
    "BatchPutEnd", "PutRevoke", "BatchPutRevoke", "UpsertStart", "UpsertEnd", "Remove",
    "BatchRemove", "RemoveByRegex", "RemoveAll", "MountSegment", "ReMountSegment",
    "UnmountSegment", "GracefulUnmountSegment", "GetFsdir", "GetStorageConfig",
    "MountLocalDiskSegment", "OffloadObjectHeartbeat", "BatchQueryIp", "CalcCacheStats",
    "QuerySegmentStatus", "FetchTasks", "MarkTaskToComplete", "PollRemoveAll",
)
"""Handler names of WrappedMasterService (rpc_service.h) a recorded id is looked up in."""
BY_ID = {frame.function_id(m): m for m in KNOWN_METHODS}


@dataclass(frozen=True)
class Recorded:
    method: str
    body: bytes


class RecordingRelay(ConnectionListener):
    """Listens on a loopback port and relays each connection to ``upstream``, recording the
    request frames clients send. ``with RecordingRelay(master) as relay: relay.address``."""

    def __init__(self, upstream: str):
        super().__init__()
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.frames: list[Recorded] = []

    def handle(self, client: socket.socket) -> None:
        server = self.track(socket.create_connection(self.upstream, timeout=10))
        server.settimeout(None)
        self.spawn(self._pipe, server, client)
        self._requests(client, server)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray()
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                buf += data
                while len(buf) >= frame.REQUEST.size:
                    head = frame.REQUEST.unpack_from(buf)
                    end = frame.REQUEST.size + head[6] + head[7]
                    if len(buf) < end:
                        break
                    body = bytes(buf[frame.REQUEST.size:frame.REQUEST.size + head[6]])
                    self.frames.append(Recorded(BY_ID.get(head[5], f"#{head[5]:08x}"), body))
                    del buf[:end]
        except OSError:
            pass


@dataclass(frozen=True)
class Comparison:
    method: str
    same: bool
    detail: str


def compare(recorded: Recorded, layout: Layout) -> Comparison | None:
    """Our re-encoding of a recorded request against its bytes (None: a call the layout does
    not declare)."""
    if recorded.method not in layout.calls:
        return None
    arg_type = sp.args_type(layout.calls[recorded.method].args)
    if arg_type is None:
        same = recorded.body == b""
        return Comparison(recorded.method, same, "no arguments" if same else
                          f"{len(recorded.body)} body bytes for a call with no arguments")
    head = sp.read_header(recorded.body)
    if head.literal is not None and head.literal != arg_type.literal():
        return Comparison(recorded.method, False, f"their literal {head.literal.hex()}, ours "
                                                  f"{arg_type.literal().hex()}")
    try:
        value = sp.deserialize(arg_type, recorded.body)
    except sp.StructPackError as exc:
        return Comparison(recorded.method, False, f"ours cannot read theirs: {exc}")
    ours = sp.serialize(arg_type, value, type_literal=head.literal is not None)
    if ours != recorded.body:
        return Comparison(recorded.method, False, f"theirs {recorded.body.hex()}, ours "
                                                  f"{ours.hex()}")
    return Comparison(recorded.method, True, f"{len(ours)} bytes identical")
