"""The master's RPC port (length-prefixed JSON frames) against hostile and idle peers (issue 14)."""

from __future__ import annotations

import json
import socket
import struct

import pytest
from hostile import (
    RSS_GROWTH_LIMIT,
    crowd_is_dropped,
    footprint,
    fuzz,
)
from hypothesis import strategies as st

from pytest_mooncake.raw_peers import exchange
from reference_engine.master.protocol import MAX_FRAME, recv_frame, send_frame

SENTINEL = "sentinel-\u2603-stored-before"
OPS = ["ping", "mount_segment", "remount_segment", "unmount_segment", "drain_segment",
       "segment_status", "put_start", "put_end", "put_revoke", "get_replica_list", "exists",
       "remove", "whois", "plant_raw_entry"]
BIG = [-1, 0, 1, 10.7, True, 2**63, 2**64, 2**70, "12", None]


def _frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


GOOD_HELLO = _frame({"op": "hello", "version": "1.3.0", "client_id": "fuzz"})


def _strategy() -> st.SearchStrategy:
    """(hello, [(kind, frame), ...]): requests after a good hello, at most one bad frame and
    only last (the server closes there); without a good hello, at most one frame."""
    scalar = st.none() | st.booleans() | st.floats() | st.text(max_size=10) | \
        st.integers(-(2**70), 2**70) | st.sampled_from(BIG)
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) |
                         st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
    segment = st.fixed_dictionaries({}, optional={
        "segment_name": st.text(max_size=10) | value, "transport_endpoint": st.text(max_size=10),
        "base": st.sampled_from(BIG) | value, "capacity": st.sampled_from(BIG) | value})
    args = st.fixed_dictionaries({}, optional={
        "key": st.text(max_size=10) | value, "size": st.sampled_from(BIG) | value,
        "replica_num": st.sampled_from(BIG) | value, "segment": segment | value,
        "segments": st.lists(segment, max_size=3) | value, "endpoint": st.text(max_size=10),
        "force": value, "client_id": st.text(max_size=8)})
    request = st.builds(lambda i, op, a: {"id": i, "op": op, "args": a}, st.integers(0, 99),
                        st.sampled_from(OPS) | value, args | value)
    good = request.map(lambda r: ("ok", _frame(r)))
    bad = st.one_of(
        st.binary(max_size=100).map(lambda b: ("bad", struct.pack(">I", len(b)) + b)),
        value.filter(lambda v: not isinstance(v, dict)).map(lambda v: ("bad", _frame(v))),
        st.integers(MAX_FRAME + 1, 2**32 - 1).map(lambda n: ("bad", struct.pack(">I", n))),
        st.integers(129, 20000).map(
            lambda d: ("bad", struct.pack(">I", 2 * d) + b"[" * d + b"]" * d)))
    frames = st.lists(good, max_size=4).flatmap(
        lambda ok: st.one_of(st.just(ok), bad.map(lambda b: [*ok, b])))
    return st.one_of(
        st.tuples(st.just(GOOD_HELLO), frames),
        st.tuples(st.just(_frame({"op": "nope"})), st.just([])),
        st.tuples(st.just(b""), st.one_of(good, bad).map(lambda f: [f])))


def _check(address, case) -> None:
    hello, frames = case
    replies = _parse_frames(exchange(address, hello + b"".join(f for _, f in frames)).data)
    if hello != GOOD_HELLO:  # the first frame must be hello: one error, then the close
        assert len(replies) == 1 and replies[0]["ok"] is False, (case, replies)
        return
    assert replies and replies[0]["ok"] is True, (case, replies)
    replies = replies[1:]
    assert len(replies) == len(frames), f"{len(frames)} frames, {len(replies)} answers: {replies}"
    for (kind, _), answer in zip(frames, replies, strict=True):
        assert isinstance(answer.get("ok"), bool), answer
        assert answer.get("error") != "INTERNAL_ERROR", answer
        if kind == "bad":
            assert answer["ok"] is False and answer["id"] is None and \
                answer["error"] == "INVALID_RPC_ARGUMENTS", answer


def _parse_frames(data: bytes) -> list[dict]:
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        assert pos + 4 + n <= len(data), f"truncated reply frame: {data[pos:pos + 80]!r}"
        out.append(json.loads(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    assert pos == len(data), f"trailing bytes after the reply frames: {data[pos:]!r}"
    return out


@pytest.fixture
def rpc_address():
    def address(cluster) -> tuple[str, int]:
        return ("127.0.0.1", cluster.masters[0].rpc_port)
    return address


def test_fuzzed_frames_get_an_answer_each_and_lose_nothing(start_master, rpc_address, mc_seed):
    cluster = start_master()
    assert cluster.client(0).put(SENTINEL)["ok"]
    pid = cluster.masters[0].process.pid
    before = footprint(pid)
    address = rpc_address(cluster)
    hello = GOOD_HELLO

    def req(**args) -> tuple[str, bytes]:
        return ("ok", _frame({"id": 1, "op": args.pop("op"), "args": args}))

    tried = fuzz(mc_seed, _strategy(), lambda case: _check(address, case), explicit=[
        (hello, [("bad", struct.pack(">I", 0xFFFFFFFF))]),
        (hello, [("bad", struct.pack(">I", 5) + b"nope!")]),
        (hello, [("bad", _frame([1, 2]))]),
        (hello, [("bad", struct.pack(">I", 20000) + b"[" * 10000 + b"]" * 10000)]),
        (hello, [req(op="put_start", key="k-float", size=10.7)]),
        (hello, [req(op="put_start", key="k-bool", size=True)]),
        (hello, [req(op="mount_segment", segment={
            "segment_name": "huge", "transport_endpoint": "huge@x", "base": 2**70,
            "capacity": 2**70})]),
        (hello, [req(op="mount_segment", segment={
            "segment_name": "wraps", "transport_endpoint": "wraps@x", "base": 2**64 - 4096,
            "capacity": 8192})]),
    ])
    after = footprint(pid)
    client = cluster.library_client(client_id="checker").start(wait=10)
    assert client.exists(SENTINEL), "an object stored before the fuzz is gone"
    for key in ("k-float", "k-bool"):
        assert not client.exists(key), f"put_start with a non-integer size reserved {key!r}"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, f"{tried} inputs: {before} -> {after}"
    print(f"master RPC: {tried} inputs; master before {before}, after {after}")


def test_put_start_takes_sizes_only_as_integers(start_master, rpc_address):
    cluster = start_master()
    with socket.create_connection(rpc_address(cluster), timeout=10) as s:
        send_frame(s, {"op": "hello", "version": "1.3.0", "client_id": "c"})
        assert recv_frame(s)["ok"]
        for args, words in [({"key": "a", "size": 10.7}, "size"),
                            ({"key": "b", "size": True}, "size"),
                            ({"key": "c", "size": 64, "replica_num": 1.5}, "replica_num"),
                            ({"key": "d", "size": 2**64}, "size")]:
            send_frame(s, {"id": 1, "op": "put_start", "args": args})
            answer = recv_frame(s)
            assert answer["ok"] is False and answer["error"] == "INVALID_PARAMS", (args, answer)
            assert words in answer["message"], answer


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_master, rpc_address):
    cluster = start_master("--rpc-recv-timeout", "1")
    served = iter(range(1000))
    print(crowd_is_dropped("master RPC port", cluster.masters[0].process.pid,
                           rpc_address(cluster),
                           struct.pack(">I", 100) + b'{"op":',  # a frame that never completes
                           lambda: cluster.client(0).put(f"served-{next(served)}")["ok"]))
