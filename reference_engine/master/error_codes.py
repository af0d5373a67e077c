"""Error codes of the store master, named as Mooncake names them, and the exception carrying one."""

from __future__ import annotations

import enum


class ErrorCode(str, enum.Enum):
    OK = "OK"
    INVALID_PARAMS = "INVALID_PARAMS"
    INVALID_VERSION = "INVALID_VERSION"
    INVALID_RPC_ARGUMENTS = "INVALID_RPC_ARGUMENTS"
    OBJECT_NOT_FOUND = "OBJECT_NOT_FOUND"
    OBJECT_ALREADY_EXISTS = "OBJECT_ALREADY_EXISTS"
    OBJECT_HAS_LEASE = "OBJECT_HAS_LEASE"
    REPLICA_IS_NOT_READY = "REPLICA_IS_NOT_READY"
    NO_AVAILABLE_HANDLE = "NO_AVAILABLE_HANDLE"
    SEGMENT_NOT_FOUND = "SEGMENT_NOT_FOUND"
    SEGMENT_ALREADY_EXISTS = "SEGMENT_ALREADY_EXISTS"
    UNAVAILABLE_IN_CURRENT_STATUS = "UNAVAILABLE_IN_CURRENT_STATUS"
    UNAVAILABLE_IN_CURRENT_MODE = "UNAVAILABLE_IN_CURRENT_MODE"
    NOT_LEADER = "NOT_LEADER"
    OPLOG_UNAVAILABLE = "OPLOG_UNAVAILABLE"
    INCOMPLETE_OPLOG_CATCH_UP = "INCOMPLETE_OPLOG_CATCH_UP"
    PROMOTION_REFUSED = "PROMOTION_REFUSED"
    RPC_FAIL = "RPC_FAIL"
    TIMEOUT = "TIMEOUT"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class MasterError(Exception):
    """A request the master refused, with the code a client can act on."""

    def __init__(self, code: ErrorCode, message: str = ""):
        self.code = ErrorCode(code)
        self.message = message or self.code.value
        super().__init__(f"{self.code.value}: {self.message}")
