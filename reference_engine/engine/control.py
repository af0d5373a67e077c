"""The control channel: JSON lines on a loopback TCP socket, one reply per request.

Request ``{"op": NAME, ...}``; reply ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "..."}`` (a bad request, never a traceback). Binary payloads travel
base64-encoded (``data_b64``). Operations:

| op | arguments | result |
|---|---|---|
| write / write_at | peer, offset or addr, data_b64 | {ok, error, retries} |
| read / read_at | peer, offset or addr, length | {ok, error, retries, data_b64} |
| local_read / local_write | offset, length or data_b64 | {data_b64} / {} |
| lookup | peer, force | {ok, descriptor (JSON object), error} |
| stats | | counters |
| descriptor | | our published descriptor (JSON object) |
| info | | {segment, instance_id, buffers, data_port, pid, profile, ttl_ms} |
| set_ttl | ttl_ms | {} |
| stop | | {} then the process exits |
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from reference_engine import untrusted_json
from reference_engine.cache import LookupFailed
from reference_engine.descriptor import to_json
from reference_engine.engine.core import Engine, Outcome
from reference_engine.hub import BINARY_LIMITS, ConnectionHub, Limits, linger_close, readable_within

log = logging.getLogger("reference_engine.control")

_JSON_SLACK = 64 << 10
MAX_REQUEST = (16 << 20) + _JSON_SLACK
"""Longest request line (``--control-max-request``): a write's base64 payload makes it 4/3 of the
bytes moved, so one request moves at most ``max_transfer(MAX_REQUEST)`` bytes (12 MiB)."""
_RECV_CHUNK = 1 << 20


def max_transfer(max_request: int) -> int:
    """Bytes one write or read may move when request lines are at most ``max_request``."""
    return max(0, (max_request - _JSON_SLACK) * 3 // 4)


class BadRequest(ValueError):
    pass


def _arg(req: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    if name not in req:
        if default is ...:
            raise BadRequest(f"missing argument {name!r}")
        return default
    value = req[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"argument {name!r} must be an integer")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise BadRequest(f"argument {name!r} must be a number")
    if kind in (str, bool) and not isinstance(value, kind):
        raise BadRequest(f"argument {name!r} must be a {kind.__name__}")
    return value


def _data(req: dict[str, Any]) -> bytes:
    try:
        return base64.b64decode(_arg(req, "data_b64", str), validate=True)
    except binascii.Error as exc:
        raise BadRequest(f"data_b64 is not base64: {exc}") from None


def _outcome(o: Outcome) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": o.ok, "error": o.error, "retries": o.retries}
    if o.data is not None:
        out["data_b64"] = base64.b64encode(o.data).decode()
    return out


class Dispatcher:
    """Maps requests to engine calls."""

    def __init__(self, engine: Engine, on_stop: Callable[[], None],
                 max_bytes: int = max_transfer(MAX_REQUEST)):
        self.engine = engine
        self.on_stop = on_stop
        self.max_bytes = max_bytes

    def _length(self, r: dict[str, Any]) -> int:
        length = _arg(r, "length", int)
        if not 0 <= length <= self.max_bytes:
            raise BadRequest(f"length {length} is outside 0..{self.max_bytes}, what one control "
                             "request may move (--control-max-request); split the transfer")
        return length

    def __call__(self, req: Any) -> Any:
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            raise BadRequest("a request is a JSON object with a string 'op'")
        handler = getattr(self, "op_" + req["op"], None)
        if handler is None:
            raise BadRequest(f"unknown op {req['op']!r}")
        return handler(req)

    def op_write(self, r):
        return _outcome(self.engine.write(_arg(r, "peer", str), _arg(r, "offset", int), _data(r)))

    def op_write_at(self, r):
        return _outcome(self.engine.write_at(_arg(r, "peer", str), _arg(r, "addr", int),
                                             _data(r)))

    def op_read(self, r):
        return _outcome(self.engine.read(_arg(r, "peer", str), _arg(r, "offset", int),
                                         self._length(r)))

    def op_read_at(self, r):
        return _outcome(self.engine.read_at(_arg(r, "peer", str), _arg(r, "addr", int),
                                            self._length(r)))

    def op_local_read(self, r):
        data = self.engine.local_read(_arg(r, "offset", int), self._length(r))
        return {"data_b64": base64.b64encode(data).decode()}

    def op_local_write(self, r):
        self.engine.local_write(_arg(r, "offset", int), _data(r))
        return {}

    def op_lookup(self, r):
        try:
            desc = self.engine.lookup(_arg(r, "peer", str), _arg(r, "force", bool, False))
        except LookupFailed as exc:
            return {"ok": False, "descriptor": None, "error": str(exc)}
        return {"ok": True, "descriptor": to_json(desc), "error": None}

    def op_stats(self, r):
        return self.engine.stats()

    def op_descriptor(self, r):
        return to_json(self.engine.descriptor)

    def op_info(self, r):
        e = self.engine
        return {"segment": e.name, "instance_id": e.descriptor.instance_id,
                "buffers": [[e.region.addr, e.region.length]],
                "data_port": e.descriptor.tcp_data_port, "pid": os.getpid(),
                "profile": e.profile.name, "ttl_ms": getattr(e.cache.policy, "ttl_ms", None)}

    def op_set_ttl(self, r):
        try:
            self.engine.set_ttl_ms(_arg(r, "ttl_ms", float))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return {}

    def op_stop(self, r):
        threading.Thread(target=self.on_stop, daemon=True).start()
        return {}


class _Session:
    """One control connection: reads JSON lines, answers each with one line.

    A line longer than ``max_request`` is refused as soon as that many bytes arrived without a
    newline (the rest is discarded, not buffered); deep or malformed JSON is a bad request."""

    def __init__(self, sock: socket.socket, peer: tuple, dispatch: Callable[[Any], Any],
                 limits: Limits, max_request: int):
        self.sock = sock
        self.peer = peer
        self.dispatch = dispatch
        self.limits = limits
        self.max_request = max_request
        self.pending = bytearray()
        self.scanned = 0
        self.idle_since = time.monotonic()

    def serve(self) -> bool:
        while True:
            nl = self.pending.find(b"\n", self.scanned)
            if nl < 0:
                if len(self.pending) > self.max_request:
                    return self._refuse_long_line()
                self.scanned = len(self.pending)
                if not self.pending and not readable_within(self.sock, self.limits.linger):
                    return True
                try:
                    chunk = self.sock.recv(_RECV_CHUNK)
                except BlockingIOError:  # SO_RCVTIMEO: nothing for the receive timeout
                    log.warning("control connection %s sent nothing for %gs mid-request; "
                                "closing it", self.peer, self.limits.recv_timeout)
                    return False
                if not chunk:
                    return False
                self.pending += chunk
                continue
            line = bytes(self.pending[:nl])
            del self.pending[:nl + 1]
            self.scanned = 0
            if len(line) > self.max_request:
                return self._refuse_long_line()
            reply = self._answer(line)
            self.idle_since = time.monotonic()  # before the reply: the peer waits from now
            self._send(reply)

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            return {"ok": True, "result": self.dispatch(untrusted_json.loads(line))}
        except (BadRequest, ValueError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        except Exception as exc:  # a bug answers the parent, it does not kill the engine
            log.exception("control request failed")
            return {"ok": False, "error": f"internal error {type(exc).__name__}: {exc}"}

    def _refuse_long_line(self) -> bool:
        log.warning("control connection %s: request longer than %d bytes; refused", self.peer,
                    self.max_request)
        self._send({"ok": False, "error": f"request longer than {self.max_request} bytes "
                    "(--control-max-request); send a smaller transfer"})
        self.pending = bytearray()
        linger_close(self.sock)
        return False

    def _send(self, reply: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(reply).encode() + b"\n")

    def closed(self) -> None:
        self.pending = bytearray()


class ControlServer:
    """The control channel's listener: ``start()``, ``port``, ``stop()``."""

    def __init__(self, dispatch: Callable[[Any], Any], host: str = "127.0.0.1", port: int = 0,
                 limits: Limits = BINARY_LIMITS, max_request: int = MAX_REQUEST):
        self.dispatch = dispatch
        self.max_request = max_request
        self._hub = ConnectionHub("control", host, port, limits, self._open_session)
        self.port = self._hub.start()

    def _open_session(self, sock: socket.socket, peer: tuple) -> _Session:
        return _Session(sock, peer, self.dispatch, self._hub.limits, self.max_request)

    def stop(self) -> None:
        self._hub.stop()
