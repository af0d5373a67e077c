"""The admin HTTP server: Prometheus metrics, health and HA state as JSON, HA actions.

GET  /metrics  /health  /role  /ha_status  /leader  /ha/promotable  /get_all_keys
POST /ha/promote (planned handover to this standby)  /ha/snapshot (standby writes a snapshot)
Binds loopback; unknown paths are 404, bad requests 4xx with a JSON reason, never a traceback.
Connections are held by a ``ConnectionHub`` (receive timeout, connection limit, no thread while
idle); request parsing is in the small functions at the end.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

from reference_engine import untrusted_json
from reference_engine.http_sessions import BodyError, HttpSessions, ParkingHandler, request_body
from reference_engine.hub import HTTP_LIMITS, ConnectionHub, Limits
from reference_engine.master.error_codes import MasterError
from reference_engine.master.metrics import render_metrics
from reference_engine.master.node_view import MasterActions, MasterView

log = logging.getLogger("reference_engine.master.admin")
MAX_BODY = 64 * 1024
MAX_PROMOTE_TIMEOUT = 600.0
"""``POST /ha/promote`` waits at most this long (seconds) for the handover."""


class AdminServer:
    """Serves ``view`` (read-only) and ``actions`` (POST) of one master."""

    def __init__(self, host: str, port: int, view: MasterView, actions: MasterActions,
                 limits: Limits = HTTP_LIMITS):
        handler = type("Handler", (_Handler,), {"view": view, "actions": actions})
        self._hub = ConnectionHub("admin-http", host, port, limits,
                                  HttpSessions(handler, self, limits))
        self._hub.bind()
        self.address = self._hub.address

    def start(self) -> None:
        self._hub.start()

    def close(self) -> None:
        self._hub.stop(timeout=2)


class _Handler(ParkingHandler):
    view: MasterView
    actions: MasterActions

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("admin: " + format, *args)

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        node = self.view
        try:
            if path == "/metrics":
                self._send(200, render_metrics(node), "text/plain; version=0.0.4")
            elif path == "/health":
                view = node.leader_view
                self._send(200, {
                    "status": "ok", "role": node.role, "ha_state": node.runtime_state,
                    "service_ready": node.serving, "profile": node.profile_name,
                    "address": node.address, "view_version": node.view_version,
                    "leader_address": node.address if node.serving else (view.address if view else None),
                })
            elif path == "/role":
                self._send(200, node.role, "text/plain")
            elif path == "/ha_status":
                self._send(200, node.runtime_state, "text/plain")
            elif path == "/leader":
                if node.serving:
                    self._send(200, {"present": True, "leader_address": node.address,
                                     "view_version": node.view_version})
                else:
                    view = node.leader_view
                    self._send(200, {"present": view is not None,
                                     "leader_address": view.address if view else None,
                                     "view_version": view.view_version if view else None})
            elif path == "/ha/promotable":
                self._send(200, node.promotability())
            elif path == "/get_all_keys":
                self._send(200, {"keys": node.keys()})
            elif path == "/ha/last_validation":
                report = node.last_validation
                self._send(200, report.to_json() if report else {})
            else:
                self._send(404, {"error": f"no such endpoint {path!r}"})
        except MasterError as exc:
            self._send(409, {"error": exc.code.value, "message": exc.message})
        except Exception as exc:  # noqa: BLE001
            log.exception("admin GET %s failed", path)
            self._send(500, {"error": type(exc).__name__, "message": str(exc)})

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        try:
            body = _json_object(request_body(self, MAX_BODY, required=False))
        except BodyError as exc:
            self._send(exc.status, {"error": exc.reason})
            self.close_after_reply(exc.unread)
            return
        node = self.actions
        try:
            if path == "/ha/promote":
                status, result = node.request_promotion(_promote_timeout(body))
                self._send(status, result)
            elif path == "/ha/snapshot":
                self._send(200, node.write_snapshot())
            else:
                self._send(404, {"error": f"no such endpoint {path!r}"})
        except BodyError as exc:
            self._send(exc.status, {"error": exc.reason})
        except MasterError as exc:
            self._send(409, {"error": exc.code.value, "message": exc.message})
        except Exception as exc:  # noqa: BLE001
            log.exception("admin POST %s failed", path)
            self._send(500, {"error": type(exc).__name__, "message": str(exc)})

    def _not_allowed(self) -> None:
        self._send(405, {"error": f"method {self.command} not allowed; use GET or POST"})
        self.close_after_reply(unread=True)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed  # noqa: N815


# ------------------------------------------------------------------ request parsing


def _json_object(raw: bytes) -> dict[str, Any]:
    """A POST body: empty, or a JSON object (bounded nesting)."""
    if not raw:
        return {}
    try:
        body = untrusted_json.loads(raw, "body")
    except untrusted_json.JsonRejected as exc:
        raise BodyError(400, f"bad JSON body: {exc}", unread=False) from None
    if not isinstance(body, dict):
        raise BodyError(400, f"bad JSON body: must be a JSON object, not {type(body).__name__}",
                        unread=False)
    return body


def _promote_timeout(body: dict[str, Any]) -> float:
    """``timeout`` of ``POST /ha/promote``: seconds, a number in (0, MAX_PROMOTE_TIMEOUT]."""
    value = body.get("timeout", 15.0)
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value <= MAX_PROMOTE_TIMEOUT):  # NaN fails the comparison too
        raise BodyError(400, f"timeout must be a number of seconds in (0, "
                             f"{MAX_PROMOTE_TIMEOUT:g}], got {repr(value)[:40]}", unread=False)
    return float(value)
