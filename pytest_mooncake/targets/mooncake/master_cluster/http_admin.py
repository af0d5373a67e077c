"""The one HTTP client of mooncake_master's admin service (``--metrics_port``): GET and JSON
POST on an admin URL, answering ``(status, body)`` with status None when nothing answered, so a
caller can say what it saw instead of raising from deep inside."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.runtime.loopback_http import http_get as admin_get
from pytest_mooncake.runtime.loopback_http import http_request, json_body

__all__ = ["admin_get", "admin_post", "json_or_none"]


def admin_post(url: str, body: Mapping[str, Any], timeout: float = 5.0) -> tuple[int | None, str]:
    """(status, body) of a JSON POST; status None when nothing answered (body: why)."""
    try:
        answer = http_request("POST", url, json_body(dict(body)), timeout=timeout)
    except OSError as exc:
        return None, str(exc)
    return answer.status, answer.text


def json_or_none(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
