"""Proxy and toxic names: what the API accepts, and how a name appears in messages and logs.

Both are path segments of the API (``/proxies/NAME/toxics/TOXIC``), so neither may contain
``/``; both are logged, so both are bounded (Toxiproxy itself bounds neither).
"""

from __future__ import annotations

from pytest_mooncake.toxiproxy import errors

MAX_NAME = 255
"""Longest name accepted, in characters (a file name's limit on Linux)."""


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters with the full length noted: an
    over-long value never reaches a message or a log line whole."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else \
            f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_name(name: str, what: str) -> str:
    """``name`` if it is a valid ``what`` name (``proxy``, ``toxic``); else ApiError 400."""
    if len(name) > MAX_NAME:
        raise errors.BAD_REQUEST_BODY.joined(
            f"{what} name {brief(name)} is longer than {MAX_NAME} characters")
    if "/" in name:
        raise errors.BAD_REQUEST_BODY.joined(f"{what} name {brief(name)} must not contain '/'")
    return name
