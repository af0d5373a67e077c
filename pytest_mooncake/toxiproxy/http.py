"""A small HTTP/1.1 server on asyncio streams: enough for a JSON control API.

Keep-alive, ``Content-Length`` and chunked request bodies, ``Expect: 100-continue``. Requests
with headers over ``MAX_HEADER_BYTES`` or bodies over ``MAX_BODY_BYTES`` are answered with
431/413 and the connection is closed; a client whose request body stalls is dropped after
``Timeouts.read`` seconds (15 s, as Toxiproxy's server), one that sends no complete request head
for ``Timeouts.idle`` seconds (60 s) too.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger("mc-toxiproxy")

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
READ_TIMEOUT = 15.0
IDLE_TIMEOUT = 60.0
DISCARD_BYTES = 16 * 1024 * 1024
DISCARD_SECONDS = 5.0


@dataclass(frozen=True)
class Timeouts:
    """Receive deadlines of the API's connections (``mc-toxiproxy --read-timeout/--idle-timeout``)."""

    read: float = READ_TIMEOUT
    """Seconds a request body may take to arrive once its head has."""
    idle: float = IDLE_TIMEOUT
    """Seconds a connection may go without sending a complete request head."""


DEFAULT_TIMEOUTS = Timeouts()


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


class RequestError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def _read_head(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    try:
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.LimitOverrunError:
        raise RequestError(431, "request header fields too large") from None
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
        return None


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise RequestError(400, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise RequestError(505, f"unsupported protocol {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise RequestError(400, f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    path = target.split("?", 1)[0]
    return method, path, version, headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise RequestError(400, "malformed chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise RequestError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        body += await reader.readexactly(size)
        await reader.readexactly(2)


async def _read_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     headers: dict[str, str], timeout: float) -> bytes:
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length_text = headers.get("content-length")
    if not chunked and length_text is None:
        return b""
    if not chunked:
        if not length_text.isdigit():
            raise RequestError(400, f"bad Content-Length {length_text[:40]!r}")
        if int(length_text) > MAX_BODY_BYTES:
            raise RequestError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        if chunked:
            return await asyncio.wait_for(_read_chunked(reader), timeout)
        return await asyncio.wait_for(reader.readexactly(int(length_text)), timeout)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError):
        raise RequestError(400, "incomplete request body") from None


async def _discard(reader: asyncio.StreamReader) -> None:
    """Read what the client still sends (bounded) before closing, so a client that writes its
    whole body before reading gets our error response instead of a connection reset."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DISCARD_SECONDS
    left = DISCARD_BYTES
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
        while left > 0 and (data := await asyncio.wait_for(
                reader.read(min(left, 65536)), max(deadline - loop.time(), 0))):
            left -= len(data)


def _encode(resp: Response, keep_alive: bool) -> bytes:
    phrase = HTTPStatus(resp.status).phrase if resp.status in HTTPStatus._value2member_map_ \
        else "Status"
    lines = [f"HTTP/1.1 {resp.status} {phrase}",
             f"Date: {email.utils.formatdate(usegmt=True)}"]
    if resp.status != 204:
        lines += [f"Content-Type: {resp.content_type}", f"Content-Length: {len(resp.body)}"]
    lines += [f"{k}: {v}" for k, v in resp.headers.items()]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + \
        (resp.body if resp.status != 204 else b"")


def plain_error(status: int, message: str) -> Response:
    """An error as Go's ``http.Error`` writes it: text/plain with a newline."""
    return Response(status, (message + "\n").encode(), "text/plain; charset=utf-8",
                    {"X-Content-Type-Options": "nosniff"})


async def serve_connection(handler: Handler, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
    try:
        while True:
            try:
                head = await _read_head(reader, timeouts.idle)
                if head is None:
                    return
                method, path, version, headers = _parse_head(head)
                body = await _read_body(reader, writer, headers, timeouts.read)
            except RequestError as exc:
                writer.write(_encode(plain_error(exc.status, f"{exc.status} {exc}"), False))
                await writer.drain()
                await _discard(reader)
                return
            conn_header = headers.get("connection", "").lower()
            keep_alive = conn_header != "close" and (version == "HTTP/1.1"
                                                     or conn_header == "keep-alive")
            try:
                resp = await handler(Request(method, path, headers, body))
            except Exception:
                log.exception("internal error handling %s %.200s", method, path)
                resp = plain_error(500, '{"error":"internal server error","status":500}')
            writer.write(_encode(resp, keep_alive))
            await writer.drain()
            if not keep_alive:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    except asyncio.CancelledError:  # server shutdown; ending quietly avoids asyncio noise
        return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def start_http_server(handler: Handler, host: str, port: int,
                            timeouts: Timeouts = DEFAULT_TIMEOUTS) -> asyncio.Server:
    return await asyncio.start_server(
        lambda r, w: serve_connection(handler, r, w, timeouts), host, port,
        limit=MAX_HEADER_BYTES)
