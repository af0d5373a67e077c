"""JSON from a peer: decoded with a nesting bound, failures as one ``ValueError`` with a reason.

Why: ``json.loads`` raises ``RecursionError`` (not ``ValueError``) on deeply nested input, which
request handlers then report as an internal error, and a value nested a few hundred levels deep
still decodes but breaks whatever walks it recursively later (``json.dumps``, logging).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 128
"""Nesting levels accepted (serde_json's default recursion limit); our protocols use < 10."""


class JsonRejected(ValueError):
    """The input is not JSON we accept; the message says why, without echoing the input."""


def loads(data: bytes | str, what: str = "request", max_depth: int = MAX_DEPTH) -> Any:
    """Decode ``data``; raise :class:`JsonRejected` naming ``what`` when it is not JSON or nests
    deeper than ``max_depth`` arrays/objects."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonRejected(f"{what}: JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise JsonRejected(f"{what} is not JSON: {_short(exc)}") from None
    if _openers(data) > max_depth and _deeper_than(value, max_depth):
        raise JsonRejected(f"{what}: JSON nested deeper than {max_depth} levels")
    return value


def _openers(data: bytes | str) -> int:
    """An upper bound of the nesting depth, counted at C speed."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _short(exc: Exception, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
