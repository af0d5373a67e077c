"""The store RPC server: connections held by a ``ConnectionHub``, handshake first, then requests.

It listens for the whole life of the master process; while this master is not the serving
leader every request answers NOT_LEADER with the leader's address, so clients fail fast. A frame
that is not protocol (oversized, not JSON, not an object, nested too deeply) is answered with an
error frame (``id`` null, ``INVALID_RPC_ARGUMENTS``) and the connection is closed; so is a peer
that sends nothing for the receive timeout mid-frame. An idle connection holds no thread.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from reference_engine.hub import BINARY_LIMITS, ConnectionHub, Limits, linger_close, readable_within
from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.protocol import (
    ConnectionClosed,
    ProtocolError,
    recv_frame,
    send_frame,
)

log = logging.getLogger("reference_engine.master.rpc")

Handler = Callable[[str, dict[str, Any], "Connection"], Any]
Hello = Callable[[dict[str, Any], "Connection"], dict[str, Any]]


class Connection:
    def __init__(self, sock: socket.socket, peer: str):
        self.sock = sock
        self.peer = peer
        self.client_version = ""
        self.client_id = ""


class RpcServer:
    def __init__(self, host: str, port: int, hello: Hello, handler: Handler,
                 limits: Limits = BINARY_LIMITS):
        self.hello = hello
        self.handler = handler
        self._hub = ConnectionHub("rpc", host, port, limits, self._open_session)
        self._hub.bind()
        self.address = self._hub.address

    def start(self) -> None:
        self._hub.start()

    def close(self) -> None:
        self._hub.stop(timeout=2)

    def _open_session(self, sock: socket.socket, peer: tuple) -> _Session:
        return _Session(Connection(sock, f"{peer[0]}:{peer[1]}"), self, self._hub.limits)


class _Session:
    def __init__(self, conn: Connection, server: RpcServer, limits: Limits):
        self.conn = conn
        self.server = server
        self.limits = limits
        self.greeted = False
        self.idle_since = time.monotonic()

    def closed(self) -> None:
        pass

    def serve(self) -> bool:
        sock = self.conn.sock
        while True:
            if not readable_within(sock, self.limits.linger):
                return True
            try:
                msg = recv_frame(sock)
            except ProtocolError as exc:
                log.warning("closing connection from %s: %s", self.conn.peer, exc)
                send_frame(sock, _error(None, MasterError(ErrorCode.INVALID_RPC_ARGUMENTS,
                                                          str(exc))))
                linger_close(sock)  # the rest of a refused frame may still be on its way
                return False
            except ConnectionClosed:
                return False
            except BlockingIOError:  # SO_RCVTIMEO: nothing for the receive timeout mid-frame
                log.warning("closing connection from %s: sent nothing for %gs mid-frame",
                            self.conn.peer, self.limits.recv_timeout)
                return False
            reply = self._greet(msg) if not self.greeted else self._request(msg)
            self.idle_since = time.monotonic()
            send_frame(sock, reply)
            if not self.greeted:
                return False

    def _greet(self, msg: dict[str, Any]) -> dict[str, Any]:
        if msg.get("op") != "hello":
            return _error(None, MasterError(ErrorCode.INVALID_RPC_ARGUMENTS,
                                            "first frame must be hello"))
        try:
            result = self.server.hello(msg, self.conn)
        except MasterError as exc:
            return _error(None, exc)
        self.greeted = True
        return {"ok": True, "result": result}

    def _request(self, msg: dict[str, Any]) -> dict[str, Any]:
        rid = msg.get("id")
        op = msg.get("op")
        args = msg.get("args") or {}
        if not isinstance(op, str) or not isinstance(args, dict):
            return _error(rid, MasterError(ErrorCode.INVALID_RPC_ARGUMENTS,
                                           "op must be a string, args an object"))
        try:
            return {"id": rid, "ok": True, "result": self.server.handler(op, args, self.conn)}
        except MasterError as exc:
            return _error(rid, exc)
        except (TypeError, ValueError, KeyError) as exc:
            return _error(rid, MasterError(ErrorCode.INVALID_PARAMS, f"{op}: {exc}"))


def _error(rid: Any, exc: MasterError) -> dict[str, Any]:
    return {"id": rid, "ok": False, "error": exc.code.value, "message": exc.message}
