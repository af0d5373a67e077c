"""Toxiproxy's HTTP API (``api.go``): routes, status codes and JSON bodies.

Success bodies are compact JSON; errors are ``{"error": "...", "status": N}`` written as Go's
``http.Error`` writes them (text/plain, trailing newline). Unknown paths answer 404, a known
path with another method 405, and browsers (User-Agent ``Mozilla/...``) 403, as Toxiproxy does.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

from pytest_mooncake.toxiproxy import errors
from pytest_mooncake.toxiproxy.collection import ProxyCollection
from pytest_mooncake.toxiproxy.errors import ApiError
from pytest_mooncake.toxiproxy.http import Request, Response, plain_error

UPDATE_METHODS = ("POST", "PATCH")


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, separators=(",", ":")).encode())


def error_response(err: ApiError) -> Response:
    return plain_error(err.status, json.dumps(err.to_json(), separators=(",", ":")))


MAX_NESTING = 128
"""Arrays/objects nested deeper than this are a bad request (the JSON decoder would otherwise
raise RecursionError, a 500); Toxiproxy's bodies nest 3 deep."""


def _decode(body: bytes) -> Any:
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise errors.BAD_REQUEST_BODY.joined("body is not UTF-8") from None
    except RecursionError:
        value = None
    except json.JSONDecodeError as exc:
        detail = "EOF" if not body.strip() else f"invalid JSON: {exc.msg} at char {exc.pos}"
        raise errors.BAD_REQUEST_BODY.joined(detail) from None
    else:
        if body.count(b"[") + body.count(b"{") <= MAX_NESTING or _nesting(value) <= MAX_NESTING:
            return value
    raise errors.BAD_REQUEST_BODY.joined(f"JSON nested deeper than {MAX_NESTING} levels")


def _nesting(value: Any) -> int:
    """How deep arrays and objects nest in a decoded value, walked without recursion."""
    deepest = 0
    todo = [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (list, dict)):
            level += 1
            deepest = max(deepest, level)
            todo.extend((v, level) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _label(value: str) -> str:
    """A Prometheus label value, escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Api:
    """Dispatches requests to the proxy collection; one mutation at a time."""

    def __init__(self, collection: ProxyCollection, version: str):
        self.collection = collection
        self.version = version
        self._lock = asyncio.Lock()

    async def handle(self, req: Request) -> Response:
        raw = req.path.strip("/").split("/") if req.path.strip("/") else []
        if req.path != "/" + "/".join(raw) or any(not seg for seg in raw):
            return plain_error(404, "404 page not found")
        parts = [urllib.parse.unquote(seg) for seg in raw]
        route = self._route(parts)
        if route is None:
            return plain_error(404, "404 page not found")
        methods, handler = route
        if req.method not in methods:
            return plain_error(405, "405 method not allowed")
        if req.headers.get("user-agent", "").startswith("Mozilla/"):
            return plain_error(403, "User agent not allowed")
        names = parts[1::2][:2] if parts[0] == "proxies" else []
        try:
            if req.method == "GET":
                return await handler(req, *names)
            async with self._lock:
                return await handler(req, *names)
        except ApiError as err:
            return error_response(err)

    def _route(self, parts: list[str]) -> tuple[tuple[str, ...], Any] | None:
        n = len(parts)
        if parts == ["version"]:
            return ("GET",), self.version_show
        if parts == ["reset"]:
            return ("POST",), self.reset
        if parts == ["populate"]:
            return ("POST",), self.populate
        if parts == ["metrics"]:
            return ("GET",), self.metrics
        if not parts or parts[0] != "proxies":
            return None
        if n == 1:
            return ("GET", "POST"), self.proxies
        if n == 2:
            return ("GET", "POST", "PATCH", "DELETE"), self.proxy
        if n == 3 and parts[2] == "toxics":
            return ("GET", "POST"), self.toxics
        if n == 4 and parts[2] == "toxics":
            return ("GET", "POST", "PATCH", "DELETE"), self.toxic
        return None

    # ------------------------------------------------------------ handlers

    async def version_show(self, req: Request) -> Response:
        body = f'{{"version": "{self.version}"}}\n'.encode()
        return Response(200, body, "application/json;charset=utf-8")

    async def metrics(self, req: Request) -> Response:
        """Toxiproxy's proxy metrics (what ``toxiproxy-server -proxy-metrics`` serves), with one
        difference: bytes count as they arrive, where Toxiproxy adds a connection's bytes when
        that direction of it ends."""
        lines = ["# TYPE toxiproxy_proxy_received_bytes_total counter"]
        for name, proxy in sorted(self.collection.proxies.items()):
            for direction, n in proxy.received.items():
                labels = ",".join(f'{k}="{_label(v)}"' for k, v in (
                    ("direction", direction), ("listener", proxy.listen), ("proxy", name),
                    ("upstream", proxy.upstream)))
                lines.append(f"toxiproxy_proxy_received_bytes_total{{{labels}}} {n}")
        return Response(200, ("\n".join(lines) + "\n").encode(),
                        "text/plain; version=0.0.4; charset=utf-8")

    async def reset(self, req: Request) -> Response:
        await self.collection.reset()
        return Response(204)

    async def populate(self, req: Request) -> Response:
        try:
            body = _decode(req.body)
        except ApiError as err:
            return json_response({**err.to_json(), "proxies": None}, err.status)
        done, err = await self.collection.populate(body)
        proxies = [p.to_json() for p in done] or None  # Go marshals an empty result as null
        if err is not None:
            return json_response({**err.to_json(), "proxies": proxies}, err.status)
        return json_response({"proxies": proxies}, 201)

    async def proxies(self, req: Request) -> Response:
        if req.method == "GET":
            return json_response({name: p.to_json()
                                  for name, p in self.collection.proxies.items()})
        proxy = await self.collection.create(_decode(req.body))
        return json_response(proxy.to_json(), 201)

    async def proxy(self, req: Request, name: str) -> Response:
        if req.method == "DELETE":
            await self.collection.remove(name)
            return Response(204)
        proxy = self.collection.get(name)
        if req.method in UPDATE_METHODS:
            await proxy.update(_decode(req.body))
        return json_response(proxy.to_json())

    async def toxics(self, req: Request, name: str) -> Response:
        proxy = self.collection.get(name)
        if req.method == "GET":
            return json_response(proxy.toxic_list())
        return json_response(proxy.add_toxic(_decode(req.body)).to_json())

    async def toxic(self, req: Request, name: str, toxic: str) -> Response:
        proxy = self.collection.get(name)
        if req.method == "DELETE":
            proxy.remove_toxic(toxic)
            return Response(204)
        if req.method in UPDATE_METHODS:
            return json_response(proxy.update_toxic(toxic, _decode(req.body)).to_json())
        return json_response(proxy.get_toxic(toxic).to_json())
