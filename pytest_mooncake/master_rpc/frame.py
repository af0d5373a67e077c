"""coro_rpc's frame as mooncake_master speaks it (yalantinglibs
include/ylt/coro_rpc/impl/protocol/coro_rpc_protocol.hpp, coro_rpc_client.hpp, router.hpp).

Request: a 20-byte little-endian header ``magic(21) version(0) serialize_type(0: struct_pack)
msg_type(0) seq_num:u32 function_id:u32 length:u32 attach_length:u32``, then ``length`` bytes
of struct_pack arguments and ``attach_length`` bytes of attachment. Response: a 16-byte header
``magic version err_code msg_type seq_num length attach_length``, then the body (the
struct_pack return value; with ``err_code`` != 0 a struct_pack string message, or with 255 a
``(uint16 code, string)`` pair) and the attachment. The function id is the first four MD5
bytes (big-endian) of the handler's qualified name, ``mooncake::WrappedMasterService::Ping``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pytest_mooncake.master_rpc.struct_pack import hash32

MAGIC = 21
PROTOCOL_VERSION = 0
REQUEST = struct.Struct("<BBBBIIII")
RESPONSE = struct.Struct("<BBBBIII")
SERVICE = "mooncake::WrappedMasterService::"

RPC_ERRORS = {1: "io_error", 2: "not_connected", 3: "timed_out", 4: "invalid_rpc_arguments",
              5: "address_in_used", 6: "bad_address", 7: "open_error", 8: "listen_error",
              9: "operation_canceled", 10: "rpc_throw_exception", 11: "function_not_registered",
              12: "protocol_error", 13: "unknown_protocol_version", 14: "message_too_large",
              15: "server_has_ran", 16: "invalid_rpc_result", 17: "serial_number_conflict"}
"""coro_rpc's ``errc`` (errno.h), for messages."""


def function_id(method: str) -> int:
    """The route key coro_rpc registers ``WrappedMasterService::method`` under."""
    return hash32((SERVICE + method).encode())


def request(seq: int, method: str, body: bytes, attachment: bytes = b"") -> bytes:
    return REQUEST.pack(MAGIC, PROTOCOL_VERSION, 0, 0, seq & 0xFFFFFFFF, function_id(method),
                        len(body), len(attachment)) + body + attachment


@dataclass(frozen=True)
class ResponseHead:
    magic: int
    version: int
    err_code: int
    msg_type: int
    seq: int
    length: int
    attach_length: int

    @classmethod
    def parse(cls, data: bytes) -> ResponseHead:
        head = cls(*RESPONSE.unpack(data))
        if head.magic != MAGIC:
            raise FrameError(f"response magic {head.magic} is not coro_rpc's {MAGIC} "
                             f"(header {data.hex()})")
        return head


class FrameError(ValueError):
    """Bytes that are not a coro_rpc response frame."""
