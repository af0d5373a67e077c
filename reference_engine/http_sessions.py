"""HTTP/1.1 servers on a ``ConnectionHub``: stdlib request handlers, parked between requests.

``ParkingHandler`` is a ``BaseHTTPRequestHandler`` that serves requests while the peer keeps
sending and then hands the keep-alive connection back to the hub (no thread while idle). Its
timeout is the hub's receive timeout, so a request head or body that stops arriving ends the
connection. Errors the stdlib raises itself (a garbage request line, an over-long header) are
short plain-text replies, not the stock HTML page. ``request_body`` reads a body by
``Content-Length`` with the checks a server needs: present, a plain decimal, within the limit,
complete before the receive timeout.
"""

from __future__ import annotations

import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from reference_engine.hub import LINGER, Limits, linger_close, readable_within

_MAX_LENGTH_DIGITS = 19
"""A Content-Length longer than this is no length any server here accepts (2^63 has 19)."""


class BodyError(Exception):
    """The request body cannot be read; ``status`` and ``reason`` are the reply."""

    def __init__(self, status: int, reason: str, *, unread: bool = True):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.unread = unread
        """Bytes of the body may still be on their way: read them away before closing."""


class ParkingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60.0
    linger = LINGER
    keep = False
    idle_since = 0.0
    body_read = False
    """``request_body`` ran for this request (else a body it announced is still unread)."""

    def handle(self) -> None:
        self.keep = False
        self.idle_since = time.monotonic()
        self.close_connection = True
        self._one_request()
        while not self.close_connection:
            if not self._more_within(self.linger):
                self.keep = True
                return
            self._one_request()

    def _one_request(self) -> None:
        self.headers = None
        self.handle_one_request()
        if not self.close_connection and self.headers is not None and not self.body_read and (
                self.headers.get("Transfer-Encoding")
                or self.headers.get("Content-Length", "0").strip() != "0"):
            # a body nobody read would be taken for the next request: end the connection
            self.close_after_reply(unread=True)

    def parse_request(self) -> bool:
        self.idle_since = time.monotonic()  # a request head arrived: idle from its reply on
        self.body_read = False
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # "GET /" alone: a reply without a status line
            self.send_error(400, "a request line needs an HTTP/1.x version")
            return False
        return True

    def _more_within(self, seconds: float) -> bool:
        """Bytes of a next request already buffered, or arriving within ``seconds``."""
        sock = self.connection
        timeout = sock.gettimeout()
        sock.settimeout(0.0)
        try:
            if self.rfile.peek(1):
                return True
        except OSError:
            return True  # the next read reports it
        finally:
            sock.settimeout(timeout)
        return readable_within(sock, seconds)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """A short plain-text error (the stdlib's is an HTML page) and a close, with an HTTP/1.1
        status line even when the request line was too broken to name a version."""
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = self.protocol_version
        phrase = self.responses.get(code, ("Error",))[0]
        text = (message or phrase).replace("\r", " ").replace("\n", " ")
        body = f"{code} {text[:200]}\n".encode("latin-1", "replace")
        self.log_error("code %d, message %s", code, text[:200])
        self.close_connection = True
        self.send_response(code, phrase)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def close_after_reply(self, unread: bool) -> None:
        """End the connection after this reply; with ``unread`` body bytes possibly still
        coming, read them away first so the peer sees the reply, not a reset."""
        self.close_connection = True
        if unread:
            linger_close(self.connection)


def request_body(handler: ParkingHandler, max_body: int, *,
                 required: bool = True) -> bytes:
    """The body announced by ``Content-Length``; ``BodyError`` when it cannot be had.

    ``required=False`` reads a missing Content-Length as an empty body."""
    if handler.headers.get("Transfer-Encoding"):
        raise BodyError(411, "chunked bodies are not accepted; send Content-Length")
    handler.body_read = True
    text = handler.headers.get("Content-Length")
    if text is None:
        if required:
            raise BodyError(411, "Content-Length required")
        return b""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= _MAX_LENGTH_DIGITS):
        raise BodyError(400, f"bad Content-Length {text[:40]!r}: not a non-negative integer")
    length = int(digits)
    if length > max_body:
        raise BodyError(413, f"body of {length} bytes exceeds the limit of {max_body}")
    body = bytearray()
    try:
        while len(body) < length:
            chunk = handler.rfile.read1(min(length - len(body), 65536))
            if not chunk:
                raise BodyError(400, f"body shorter than Content-Length: {len(body)} of "
                                     f"{length} bytes before the peer closed", unread=False)
            body += chunk
    except TimeoutError:
        raise BodyError(400, f"body shorter than Content-Length: {len(body)} of {length} bytes "
                             f"arrived, then nothing for {handler.timeout:g}s",
                        unread=False) from None
    return bytes(body)


class HttpSessions:
    """The hub's ``open_session`` for an HTTP server: ``handler_cls(sock, peer, context)`` per
    activation; the handler reaches ``context`` as ``self.server``."""

    def __init__(self, handler_cls: type[ParkingHandler], context: Any, limits: Limits):
        self.handler_cls = type(handler_cls.__name__, (handler_cls,),
                                {"timeout": limits.recv_timeout, "linger": limits.linger})
        self.context = context

    def __call__(self, sock: socket.socket, peer: tuple) -> _HttpSession:
        return _HttpSession(self.handler_cls, sock, peer, self.context)


class _HttpSession:
    def __init__(self, handler_cls: type[ParkingHandler], sock: socket.socket, peer: tuple,
                 context: Any):
        self.handler_cls = handler_cls
        self.sock = sock
        self.peer = peer
        self.context = context
        self.idle_since = time.monotonic()

    def serve(self) -> bool:
        handler = self.handler_cls(self.sock, self.peer, self.context)
        self.idle_since = handler.idle_since
        if handler.keep:
            self.sock.settimeout(None)  # back to kernel timeouts while parked
        return handler.keep

    def closed(self) -> None:
        pass
