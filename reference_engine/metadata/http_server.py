"""An HTTP metadata server that follows Mooncake's API (mooncake-semantics.md 1.6).

``GET|PUT|DELETE /metadata?key=K`` with the status codes of Mooncake's C++ server: a missing
key parameter is 400, an absent key 404, and re-putting an existing ``rpc_meta`` key succeeds
only with an identical body (400 otherwise). ``GET /health`` answers 200. Extension:
``GET /metadata/keys?prefix=P`` lists keys as a JSON array. Binds loopback unless told
otherwise; oversized or malformed requests get a 4xx with a one-line plain-text reason, never a
traceback or an HTML page; a refused body is read away (bounded) so the client sees the reply.
Connections are held by a ``ConnectionHub`` (receive timeout, connection limit, no thread while
idle).
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from reference_engine.http_sessions import BodyError, HttpSessions, ParkingHandler, request_body
from reference_engine.hub import HTTP_LIMITS, ConnectionHub, Limits

MAX_BODY_BYTES = 8 << 20
"""Requests above this are refused with 413. Larger than the decoder's 1 MiB value limit on
purpose: a test must be able to plant an oversized descriptor and watch the engine reject it."""
MAX_KEY_CHARS = 4096

log = logging.getLogger("reference_engine.metadata.http_server")


class MetadataHttpServer:
    """``start()`` serves from the hub's threads; ``stop()`` closes everything."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, path: str = "/metadata",
                 max_body: int = MAX_BODY_BYTES, limits: Limits = HTTP_LIMITS):
        self.path = path.rstrip("/") or "/metadata"
        self.max_body = max_body
        self.data: dict[str, bytes] = {}
        self.data_lock = threading.Lock()
        self._hub = ConnectionHub("metadata-http", host, port, limits,
                                  HttpSessions(_Handler, self, limits))
        self._hub.bind()
        self.server_address = (self._hub.host, self._hub.port)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{self.path}"

    def start(self) -> MetadataHttpServer:
        self._hub.start()
        return self

    def stop(self) -> None:
        self._hub.stop()


class _Handler(ParkingHandler):
    server: MetadataHttpServer
    server_version = "reference-metadata/1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib name)
        log.debug("%s " + format, self.client_address[0], *args)

    def _reply(self, status: int, body: bytes | str, content_type: str = "text/plain") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, dict[str, list[str]]] | None:
        split = urlsplit(self.path)
        if split.path == "/health" and self.command == "GET":
            self._reply(200, "OK")
            return None
        if split.path not in (self.server.path, self.server.path + "/keys"):
            self._reply(404, "not found")
            return None
        return split.path, parse_qs(split.query, keep_blank_values=True)

    def _key(self, query: dict[str, list[str]]) -> str | None:
        values = query.get("key", [])
        if not values or not values[0]:
            self._reply(400, "Missing key parameter")
            return None
        if len(values) > 1:
            self._reply(400, "key parameter given more than once")
            return None
        if len(values[0]) > MAX_KEY_CHARS:
            self._reply(400, f"key longer than {MAX_KEY_CHARS} characters")
            return None
        return values[0]

    def _guard(self, method) -> None:
        try:
            method()
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # a bug here must answer 500, not kill the thread silently
            log.exception("metadata server error on %s %s", self.command, self.path)
            self.close_connection = True
            try:
                self._reply(500, f"internal error: {type(exc).__name__}")
            except OSError:
                pass

    def do_GET(self) -> None:
        self._guard(self._get)

    def do_PUT(self) -> None:
        self._guard(self._put)

    def do_DELETE(self) -> None:
        self._guard(self._delete)

    def _not_allowed(self) -> None:
        self._reply(405, "Method not allowed")
        self.close_after_reply(unread=True)

    do_POST = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed  # noqa: N815

    def _get(self) -> None:
        route = self._route()
        if route is None:
            return
        path, query = route
        if path.endswith("/keys"):
            prefix = query.get("prefix", [""])[0]
            with self.server.data_lock:
                keys = sorted(k for k in self.server.data if k.startswith(prefix))
            self._reply(200, json.dumps(keys), "application/json")
            return
        key = self._key(query)
        if key is None:
            return
        with self.server.data_lock:
            value = self.server.data.get(key)
        if value is None:
            self._reply(404, "metadata not found")
        else:
            self._reply(200, value, "application/json")

    def _read_body(self) -> bytes | None:
        try:
            return request_body(self, self.server.max_body)
        except BodyError as exc:
            self._reply(exc.status, exc.reason)
            self.close_after_reply(exc.unread)
            return None

    def _put(self) -> None:
        route = self._route()
        if route is None:
            return
        _, query = route
        key = self._key(query)
        if key is None:
            return
        body = self._read_body()
        if body is None:
            return
        with self.server.data_lock:
            old = self.server.data.get(key)
            if "rpc_meta" in key and old is not None:
                if old == body:
                    status, text = 200, "metadata unchanged"
                else:
                    status, text = 400, "Duplicate rpc_meta key not allowed"
            else:
                self.server.data[key] = body
                status, text = 200, "metadata updated"
        self._reply(status, text)

    def _delete(self) -> None:
        route = self._route()
        if route is None:
            return
        _, query = route
        key = self._key(query)
        if key is None:
            return
        with self.server.data_lock:
            existed = self.server.data.pop(key, None) is not None
        self._reply(200 if existed else 404,
                    "metadata deleted" if existed else "metadata not found")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    host = host.strip("[]")
    return host or "127.0.0.1", int(port)


__all__ = ["MetadataHttpServer", "parse_listen", "HTTPStatus"]
