"""Application-level metadata faults: plant malformed, truncated, oversized or foreign
descriptors, delete keys, serve stale values. Works on any ``MetadataHandle`` and on raw JSON
only, so suites stay target-agnostic.

Foreign descriptors come in two kinds: ``plant_foreign`` puts another segment's value,
unchanged (its ``name`` says so), under this segment's key; ``from_another_process`` makes a
value that claims this segment's name and data endpoint but describes another process (its
``instance_id`` and buffers). Stale values: ``capture`` keeps the bytes stored now,
``serve_stale`` puts them back later, over whatever was published since.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.targets.base import LookupResult, MetadataHandle


def published(store: MetadataHandle, segment: str) -> dict[str, Any]:
    """The descriptor of ``segment`` as it is stored now (decoded JSON)."""
    raw = store.get(store.segment_key(segment))
    assert raw is not None, f"no descriptor published under {store.segment_key(segment)!r}"
    return json.loads(raw)


def plant(store: MetadataHandle, segment: str, doc: dict[str, Any] | bytes) -> None:
    """Put a descriptor (or raw bytes) under ``segment``'s key, as a fault or a new version."""
    raw = doc if isinstance(doc, bytes) else json.dumps(doc, separators=(",", ":")).encode()
    store.put(store.segment_key(segment), raw)


def with_probe_buffer(doc: dict[str, Any], tag: str, first: bool = False) -> dict[str, Any]:
    """A valid new version of ``doc``: one more buffer named ``tag``, at an address past the
    existing ones; ``first`` lists it first, so a target that reveals only a peer's first
    buffer (a real build's lookup) shows which version it serves. Only for lookups: nothing
    backs the probe buffer's memory."""
    new = json.loads(json.dumps(doc))
    end = max(b["addr"] + b["length"] for b in new["buffers"])
    probe = {"name": tag, "addr": end + (1 << 20), "length": 4096}
    new["buffers"] = [probe, *new["buffers"]] if first else [*new["buffers"], probe]
    return new


def without_instance_id(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a pre-RFC writer would publish it."""
    return {k: v for k, v in doc.items() if k != "instance_id"}


def in_0_3_11_form(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as Mooncake 0.3.11 publishes a TCP segment: no ``instance_id``, no
    ``tcp_proto_version`` (a reader takes it as 1, ``mooncake-semantics.md`` 1.3), no
    ``tcp_data_host`` (a reader takes the host from the segment's RPC entry, ``rpc_meta_key``)
    and no ``rdma_server_name``: the oldest form a reader meets in a rolling upgrade."""
    gone = ("instance_id", "tcp_proto_version", "tcp_data_host", "rdma_server_name")
    return {k: v for k, v in doc.items() if k not in gone}


def rpc_meta_key(store: MetadataHandle, segment: str) -> str:
    """The key of ``segment``'s RPC entry (``<prefix>rpc_meta/<server_name>``, beside
    ``<prefix>ram/<segment>``, ``mooncake-semantics.md`` 1.4): where a Mooncake reader finds the
    host of a peer whose descriptor names none. The handle's own answer where it has one."""
    own = getattr(store, "rpc_meta_key", None)
    if own is not None:
        return own(segment)
    key = store.segment_key(segment)
    head, ram, name = key.rpartition("ram/")
    assert ram and "/" not in name, (
        f"precondition: segment {segment!r} is stored under {key!r}, not <prefix>ram/<name>; "
        f"its RPC entry's key cannot be told")
    return f"{head}rpc_meta/{name}"


def plant_foreign(store: MetadataHandle, segment: str, other: str) -> dict[str, Any]:
    """Put ``other``'s published descriptor, byte for byte, under ``segment``'s key: a value of
    another segment where this one's belongs. Returns the planted descriptor."""
    key = store.segment_key(other)
    raw = store.get(key)
    assert raw is not None, f"no descriptor published under {key!r}"
    plant(store, segment, raw)
    return json.loads(raw)


def from_another_process(doc: dict[str, Any], donor: dict[str, Any] | None = None
                         ) -> dict[str, Any]:
    """``doc`` (a segment's descriptor) as another process would claim it: the same ``name``
    and data endpoint, but the ``instance_id`` and buffers of ``donor`` (another process's
    descriptor), or, without a donor, a fresh random ``instance_id`` and buffers 1 GiB past
    ``doc``'s, memory the owner never registered."""
    new = json.loads(json.dumps(doc))
    if donor is not None:
        new["buffers"] = json.loads(json.dumps(donor["buffers"]))
        if "instance_id" in donor:
            new["instance_id"] = donor["instance_id"]
        else:
            new.pop("instance_id", None)
        return new
    start = min(b["addr"] for b in new["buffers"])
    span = max(b["addr"] + b["length"] for b in new["buffers"]) - start
    shift = (span + (1 << 30) + 4095) // 4096 * 4096  # past every buffer of doc, page aligned
    new["buffers"] = [dict(b, addr=b["addr"] + shift) for b in new["buffers"]]
    new["instance_id"] = secrets.token_hex(16)
    return new


@dataclass(frozen=True)
class Captured:
    """A value as it was stored at one moment (``raw`` is None if the key was absent)."""

    key: str
    raw: bytes | None

    @property
    def doc(self) -> dict[str, Any]:
        assert self.raw is not None, f"{self.key!r} was absent when captured"
        return json.loads(self.raw)


def capture(store: MetadataHandle, segment: str) -> Captured:
    """The bytes stored under ``segment``'s key now, to serve again later (``serve_stale``)."""
    key = store.segment_key(segment)
    return Captured(key, store.get(key))


def serve_stale(store: MetadataHandle, old: Captured) -> None:
    """Make the store serve a previously captured (older) value again, over whatever was
    published since: the stale value a lagging replica or a delayed write would serve. A value
    captured absent deletes the key."""
    if old.raw is None:
        store.delete(old.key)
    else:
        store.put(old.key, old.raw)


def buffer_names(desc: dict[str, Any] | None) -> list[str]:
    return [b.get("name") for b in (desc or {}).get("buffers", [])]


def shows(result: LookupResult, doc: dict[str, Any]) -> bool:
    """Whether a lookup served ``doc``, judged on what the target reveals: the whole buffer
    list, or where the result is ``partial`` (a real build: the first buffer's address) the
    fields it carries."""
    if not result.ok or result.descriptor is None:
        return False
    seen = list(result.descriptor.get("buffers", []))
    want = list(doc.get("buffers", []))
    if not result.partial:
        return _whole(dict(result.descriptor)) == _whole(doc)
    return len(seen) <= len(want) and all(
        all(w.get(k) == v for k, v in s.items()) for s, w in zip(seen, want, strict=False))


def _whole(doc: dict[str, Any]) -> tuple:
    """What a descriptor says, whole: its identity and every buffer's name and range."""
    return (doc.get("instance_id"),
            sorted((b.get("name"), b.get("addr"), b.get("length")) for b in doc.get("buffers", [])))


def described(result: LookupResult) -> str:
    """What a lookup served, for a message: buffer names, or the addresses a partial result
    reveals, or the failure."""
    if not result.ok:
        return f"failure: {result.error}"
    bufs = (result.descriptor or {}).get("buffers", [])
    if result.partial:
        return "first buffer at " + ", ".join(hex(int(b["addr"])) for b in bufs)
    return str(buffer_names(dict(result.descriptor or {})))


@dataclass(frozen=True)
class MalformedValue:
    name: str
    raw: bytes
    why: str


def ending_at_the_last_address(valid: dict[str, Any]) -> dict[str, Any]:
    """``valid`` with its first buffer moved so that its last byte is the last 64-bit address:
    the largest range a descriptor may hold (one byte further is ``past-64-bits`` below)."""
    first = dict(valid["buffers"][0])
    return dict(valid, buffers=[dict(first, addr=(1 << 64) - first["length"])])


def at_the_first_address(valid: dict[str, Any]) -> dict[str, Any]:
    """``valid`` with its first buffer moved to address 1: the lowest a buffer may start at
    (address 0 is ``null-address`` below)."""
    first = dict(valid["buffers"][0])
    return dict(valid, buffers=[dict(first, addr=1)])


def of_one_byte(valid: dict[str, Any]) -> dict[str, Any]:
    """``valid`` with its first buffer cut to one byte, the fewest a buffer may hold (none is
    ``zero-length`` below), and moved 8 MiB up, so a target that reveals only a peer's first
    buffer address shows whether it adopted it."""
    first = dict(valid["buffers"][0])
    return dict(valid, buffers=[dict(first, addr=first["addr"] + (8 << 20), length=1)])


def in_rdma_form(valid: dict[str, Any], devices: int = 1, rkeys: int = 1,
                 lkeys: int = 1) -> dict[str, Any]:
    """``valid`` as Mooncake's RDMA transport publishes a descriptor (``mooncake-semantics.md``
    1.2): protocol ``rdma``, ``devices`` NICs, a priority matrix, ``tcp_data_port`` 0 and
    ``tcp_proto_version`` 1, its first buffer carrying ``rkeys`` rkeys and ``lkeys`` lkeys and
    moved 8 MiB up (so a target that reveals only a peer's first buffer address shows whether
    it adopted it). The defaults are valid: one key of each per device. Mooncake's decoder
    rejects the whole descriptor when a buffer's rkeys are not one per lkey or, for rdma, not
    one per device (1.3)."""
    first = dict(valid["buffers"][0])
    nics = [f"mlx5_{i}" for i in range(devices)]
    gid = ":".join(["00"] * 10 + ["ff", "ff", "7f", "00", "00", "01"])
    return dict(valid, protocol="rdma", tcp_data_port=0, tcp_proto_version=1,
                devices=[{"name": n, "lid": 0, "gid": gid} for n in nics],
                priority_matrix={first["name"]: [nics, []]},
                buffers=[dict(first, addr=first["addr"] + (8 << 20),
                              rkey=[0x1234 + i for i in range(rkeys)],
                              lkey=[0x1234 + i for i in range(lkeys)])])


def malformed_values(valid: dict[str, Any]) -> list[MalformedValue]:
    """Broken versions of a real descriptor (``valid``), one per way a value can be wrong. Each
    one that still decodes moves the first buffer, so a target that reveals only a peer's
    first buffer address shows whether it adopted it."""
    good = json.dumps(valid, separators=(",", ":")).encode()
    first = dict(valid["buffers"][0])
    overlap = dict(valid, buffers=[dict(first, name="overlap", addr=first["addr"] + 1), first])
    return [
        MalformedValue("truncated", good[: len(good) // 2], "JSON cut in half"),
        MalformedValue("not-json", b"this is not json", "not JSON at all"),
        MalformedValue("non-utf8", b'{"name":"\xff\xfe"}', "bytes that are not UTF-8"),
        MalformedValue("wrong-type-buffers", json.dumps(dict(valid, buffers="all")).encode(),
                       "buffers is a string"),
        MalformedValue("wrong-type-addr", json.dumps(
            dict(valid, buffers=[dict(first, addr="0x10")])).encode(), "a buffer addr is a string"),
        MalformedValue("zero-length", json.dumps(
            dict(valid, buffers=[dict(first, addr=first["addr"] + (8 << 20), length=0)])).encode(),
            "a buffer of length 0"),
        MalformedValue("overlapping-buffers", json.dumps(overlap).encode(), "two buffers overlap"),
        MalformedValue("past-64-bits", json.dumps(dict(valid, buffers=[dict(
            first, addr=(1 << 64) - first["length"] + 1)])).encode(),
            "a buffer whose last byte lies one past the 64-bit address space"),
        MalformedValue("null-address", json.dumps(dict(valid, buffers=[dict(first, addr=0)])).encode(),
                       "a buffer at address 0 (the null pointer, never registrable memory)"),
        MalformedValue("empty-buffer-name", json.dumps(dict(valid, buffers=[dict(
            first, name="", addr=first["addr"] + (8 << 20))])).encode(),
            "a buffer with an empty name (its location: Mooncake's own decoder rejects the "
            "whole descriptor)"),
        MalformedValue("rkeys-unlike-lkeys", json.dumps(
            in_rdma_form(valid, devices=2, rkeys=2, lkeys=1)).encode(),
            "an rdma buffer with two rkeys but one lkey (Mooncake's own decoder rejects the "
            "whole descriptor)"),
        MalformedValue("rkeys-not-one-per-device", json.dumps(
            in_rdma_form(valid, devices=1, rkeys=2, lkeys=2)).encode(),
            "an rdma buffer with two keys of each kind on a peer of one device (Mooncake's own "
            "decoder rejects the whole descriptor)"),
        # over any sane descriptor limit (1 MiB), under etcd's default 1.5 MiB request limit
        MalformedValue("huge", b'{"name":"' + b"x" * 1_400_000 + b'"}', "a 1.4 MB value"),
        MalformedValue("empty", b"", "an empty value"),
        MalformedValue("array", b"[]", "a JSON array instead of an object"),
    ]
