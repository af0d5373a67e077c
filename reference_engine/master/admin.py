"""The admin HTTP server: Prometheus metrics, health and HA state as JSON, HA actions.

GET  /metrics  /health  /role  /ha_status  /leader  /ha/promotable  /get_all_keys
POST /ha/promote (planned handover to this standby)  /ha/snapshot (standby writes a snapshot)
Binds loopback; unknown paths are 404, bad requests 4xx with a JSON reason, never a traceback.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from reference_engine.master.error_codes import MasterError
from reference_engine.master.metrics import render_metrics
from reference_engine.master.node_view import MasterActions, MasterView

log = logging.getLogger("reference_engine.master.admin")
MAX_BODY = 64 * 1024


class AdminServer:
    """Serves ``view`` (read-only) and ``actions`` (POST) of one master."""

    def __init__(self, host: str, port: int, view: MasterView, actions: MasterActions):
        handler = type("Handler", (_Handler,), {"view": view, "actions": actions})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        host_, port_ = self.httpd.server_address[:2]
        self.address = f"{host_}:{port_}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="admin-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    view: MasterView
    actions: MasterActions
    protocol_version = "HTTP/1.1"

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
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, {"error": f"body larger than {MAX_BODY} bytes"})
            return
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._send(400, {"error": f"bad JSON body: {exc}"})
            return
        node = self.actions
        try:
            if path == "/ha/promote":
                timeout = float(body.get("timeout", 15.0))
                status, result = node.request_promotion(timeout)
                self._send(status, result)
            elif path == "/ha/snapshot":
                self._send(200, node.write_snapshot())
            else:
                self._send(404, {"error": f"no such endpoint {path!r}"})
        except MasterError as exc:
            self._send(409, {"error": exc.code.value, "message": exc.message})
        except Exception as exc:  # noqa: BLE001
            log.exception("admin POST %s failed", path)
            self._send(500, {"error": type(exc).__name__, "message": str(exc)})
