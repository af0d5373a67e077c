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
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from reference_engine.cache import LookupFailed
from reference_engine.descriptor import to_json
from reference_engine.engine.core import Engine, Outcome

log = logging.getLogger("reference_engine.control")

MAX_LINE = 64 << 20


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

    def __init__(self, engine: Engine, on_stop: Callable[[], None]):
        self.engine = engine
        self.on_stop = on_stop

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
                                         _arg(r, "length", int)))

    def op_read_at(self, r):
        return _outcome(self.engine.read_at(_arg(r, "peer", str), _arg(r, "addr", int),
                                            _arg(r, "length", int)))

    def op_local_read(self, r):
        data = self.engine.local_read(_arg(r, "offset", int), _arg(r, "length", int))
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


class _Handler(socketserver.StreamRequestHandler):
    server: ControlServer

    def handle(self) -> None:
        while True:
            line = self.rfile.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE:
                self._send({"ok": False, "error": f"request longer than {MAX_LINE} bytes"})
                return
            try:
                reply = {"ok": True, "result": self.server.dispatch(json.loads(line))}
            except (BadRequest, ValueError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            except Exception as exc:  # a bug answers the parent, it does not kill the engine
                log.exception("control request failed")
                reply = {"ok": False, "error": f"internal error {type(exc).__name__}: {exc}"}
            self._send(reply)

    def _send(self, reply: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(reply).encode() + b"\n")
        self.wfile.flush()


class ControlServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, dispatch: Callable[[Any], Any], host: str = "127.0.0.1", port: int = 0):
        self.dispatch = dispatch
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]
