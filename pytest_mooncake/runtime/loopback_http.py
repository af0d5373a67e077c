"""One HTTP request to a server the run started or was given (admin ports, metadata servers,
Toxiproxy): the status and body of any answer, 4xx and 5xx included; ``OSError`` only when
nothing answered. Every HTTP client of the framework is this function plus its own decoding."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes
    content_type: str = ""

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.body)


def http_request(method: str, url: str, body: bytes | None = None, timeout: float = 5.0,
                 content_type: str = "application/json") -> HttpAnswer:
    """``method url`` with ``body``; the answer whatever its status. Raises ``OSError`` (refused,
    reset, timed out) when no HTTP answer came."""
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return HttpAnswer(resp.status, resp.read(), resp.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as exc:
        return HttpAnswer(exc.code, exc.read(), exc.headers.get("Content-Type", "") if exc.headers
                          else "")


def http_get(url: str, timeout: float = 2.0) -> tuple[int | None, str]:
    """``(status, body text)`` of a GET; status None when nothing answered (the body says why),
    so a caller can report what it saw instead of raising from deep inside."""
    try:
        answer = http_request("GET", url, timeout=timeout)
    except OSError as exc:
        return None, str(exc)
    return answer.status, answer.text


def json_body(value: Any) -> bytes | None:
    """A request body: ``value`` as JSON, or None for no body."""
    return None if value is None else json.dumps(value).encode()
