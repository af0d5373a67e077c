"""Application-level metadata faults: plant malformed, truncated, oversized or foreign
descriptors, delete keys, serve stale values. Works on any ``MetadataHandle`` and on raw JSON
only, so suites stay target-agnostic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.targets.base import MetadataHandle


def published(store: MetadataHandle, segment: str) -> dict[str, Any]:
    """The descriptor of ``segment`` as it is stored now (decoded JSON)."""
    raw = store.get(store.segment_key(segment))
    assert raw is not None, f"no descriptor published under {store.segment_key(segment)!r}"
    return json.loads(raw)


def plant(store: MetadataHandle, segment: str, doc: dict[str, Any] | bytes) -> None:
    """Put a descriptor (or raw bytes) under ``segment``'s key, as a fault or a new version."""
    raw = doc if isinstance(doc, bytes) else json.dumps(doc, separators=(",", ":")).encode()
    store.put(store.segment_key(segment), raw)


def with_probe_buffer(doc: dict[str, Any], tag: str) -> dict[str, Any]:
    """A valid new version of ``doc``: one more buffer named ``tag``, past the existing ones."""
    new = json.loads(json.dumps(doc))
    end = max(b["addr"] + b["length"] for b in new["buffers"])
    new["buffers"].append({"name": tag, "addr": end + (1 << 20), "length": 4096})
    return new


def without_instance_id(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a pre-RFC writer would publish it."""
    return {k: v for k, v in doc.items() if k != "instance_id"}


def buffer_names(desc: dict[str, Any] | None) -> list[str]:
    return [b.get("name") for b in (desc or {}).get("buffers", [])]


@dataclass(frozen=True)
class MalformedValue:
    name: str
    raw: bytes
    why: str


def malformed_values(valid: dict[str, Any]) -> list[MalformedValue]:
    """Broken versions of a real descriptor (``valid``), one per way a value can be wrong."""
    good = json.dumps(valid, separators=(",", ":")).encode()
    first = dict(valid["buffers"][0])
    overlap = dict(valid, buffers=[first, dict(first, name="overlap", addr=first["addr"] + 1)])
    return [
        MalformedValue("truncated", good[: len(good) // 2], "JSON cut in half"),
        MalformedValue("not-json", b"this is not json", "not JSON at all"),
        MalformedValue("non-utf8", b'{"name":"\xff\xfe"}', "bytes that are not UTF-8"),
        MalformedValue("wrong-type-buffers", json.dumps(dict(valid, buffers="all")).encode(),
                       "buffers is a string"),
        MalformedValue("wrong-type-addr", json.dumps(
            dict(valid, buffers=[dict(first, addr="0x10")])).encode(), "a buffer addr is a string"),
        MalformedValue("zero-length", json.dumps(
            dict(valid, buffers=[dict(first, length=0)])).encode(), "a buffer of length 0"),
        MalformedValue("overlapping-buffers", json.dumps(overlap).encode(), "two buffers overlap"),
        # over any sane descriptor limit (1 MiB), under etcd's default 1.5 MiB request limit
        MalformedValue("huge", b'{"name":"' + b"x" * 1_400_000 + b'"}', "a 1.4 MB value"),
        MalformedValue("empty", b"", "an empty value"),
        MalformedValue("array", b"[]", "a JSON array instead of an object"),
    ]
