"""Client of Mooncake's HTTP metadata API: ``GET|PUT|DELETE <base>?key=<key>``.

As in Mooncake's plugin, only 200 is success; 404 on GET/DELETE means absent. ``keys`` uses
``GET <base>/keys?prefix=`` which only the reference server offers.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote

from reference_engine.metadata.store import MetadataError


class HttpStore:
    def __init__(self, url: str, timeout: float = 3.0):
        self.uri = url
        self.timeout = timeout

    def _request(self, method: str, op: str, key: str, url: str,
                 body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (OSError, ValueError) as exc:
            raise MetadataError(self.uri, op, key, f"{type(exc).__name__}: {exc}") from None

    def _key_url(self, key: str) -> str:
        return f"{self.uri}?key={quote(key, safe='')}"

    def _fail(self, op: str, key: str, status: int, body: bytes) -> MetadataError:
        text = body[:200].decode("utf-8", "replace").strip()
        return MetadataError(self.uri, op, key, f"HTTP {status}: {text}")

    def get(self, key: str) -> bytes | None:
        status, body = self._request("GET", "get", key, self._key_url(key))
        if status == 200:
            return body
        if status == 404:
            return None
        raise self._fail("get", key, status, body)

    def put(self, key: str, value: bytes) -> None:
        status, body = self._request("PUT", "put", key, self._key_url(key), bytes(value))
        if status != 200:
            raise self._fail("put", key, status, body)

    def delete(self, key: str) -> bool:
        status, body = self._request("DELETE", "delete", key, self._key_url(key))
        if status == 200:
            return True
        if status == 404:
            return False
        raise self._fail("delete", key, status, body)

    def keys(self, prefix: str = "") -> list[str]:
        url = f"{self.uri.rstrip('/')}/keys?prefix={quote(prefix, safe='')}"
        status, body = self._request("GET", "keys", prefix, url)
        if status != 200:
            raise self._fail("keys", prefix, status, body)
        try:
            keys = json.loads(body)
        except ValueError:
            raise self._fail("keys", prefix, status, body) from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise self._fail("keys", prefix, status, body)
        return keys

    def close(self) -> None:
        pass
