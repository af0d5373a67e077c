"""The engine's control port (JSON lines) against hostile and idle peers (issue 14)."""

from __future__ import annotations

import base64
import json

from hostile import (
    RSS_GROWTH_LIMIT,
    crowd_is_dropped,
    footprint,
    fuzz,
)
from hypothesis import strategies as st

from pytest_mooncake.raw_peers import exchange

BUFFER = 1 << 20
SENTINEL_AT = BUFFER - 4096
SENTINEL = b"control sentinel " * 32
OPS = ["write", "write_at", "read", "read_at", "local_read", "local_write", "lookup", "stats",
       "descriptor", "info", "set_ttl"]  # not "stop": that one legitimately ends the engine
BIG = [-1, 0, 1, 2**31, 2**40, 2**63, 2**64, 2**70, -(2**70)]


def _requests(name: str, base: int) -> st.SearchStrategy[bytes]:
    # offsets and addresses never reach the sentinel: whatever the fuzz writes may land
    offset = st.one_of(st.integers(0, BUFFER // 2), st.sampled_from(BIG),
                       st.integers(BUFFER, 2**70))
    scalar = st.none() | st.booleans() | st.floats() | st.text(max_size=12) | \
        st.integers(-(2**70), 2**70)
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) |
                         st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
    args = st.fixed_dictionaries({}, optional={
        "peer": st.sampled_from([name, "nobody", ""]) | st.text(max_size=20) | value,
        "offset": offset | value,
        "addr": offset.map(lambda o: base + o if 0 <= o < BUFFER // 2 else o) | value,
        "length": st.integers(0, 4096) | st.sampled_from(BIG) | value,
        "data_b64": st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())
        | st.text(max_size=20) | value,
        "force": st.booleans() | value,
        "ttl_ms": st.floats() | st.integers() | value,
    })
    obj = st.builds(lambda op, a: {"op": op, **a},
                    st.sampled_from(OPS) | st.text(max_size=10) | value, args)
    line = st.one_of(obj.map(lambda o: json.dumps(o).encode()),
                     value.map(lambda v: json.dumps(v).encode()),
                     st.binary(max_size=200).filter(lambda b: b"\n" not in b))
    return st.lists(line, min_size=1, max_size=3).map(lambda ls: b"".join(x + b"\n" for x in ls))


def _check_replies(payload: bytes, data: bytes) -> None:
    lines = data.split(b"\n")
    requests = payload.count(b"\n")
    assert lines[-1] == b"", f"reply not newline-terminated: {data[-80:]!r}"
    assert len(lines) - 1 == requests, (
        f"{requests} requests, {len(lines) - 1} replies: {data[:200]!r}")
    for line in lines[:-1]:
        reply = json.loads(line)
        assert isinstance(reply.get("ok"), bool), reply
        if not reply["ok"]:
            error = reply.get("error")
            assert isinstance(error, str) and not error.startswith("internal error"), (
                f"{payload[:120]!r} got {error!r}: a bad request must be named, not an "
                f"internal error")


def test_fuzzed_control_requests_get_named_errors_and_lose_nothing(start_engine, mc_seed):
    engine = start_engine(buffer_size=BUFFER)
    engine.client.call("local_write", offset=SENTINEL_AT,
                       data_b64=base64.b64encode(SENTINEL).decode())
    before = footprint(engine.pid)

    def check(payload: bytes) -> None:
        _check_replies(payload, exchange(engine.control, payload).data)

    def line(**req) -> bytes:
        return json.dumps(req).encode() + b"\n"

    tried = fuzz(mc_seed, _requests(engine.name, engine.buffer[0]), check, explicit=[
        line(op="read", peer=engine.name, offset=0, length=2**40),
        line(op="read_at", peer=engine.name, addr=engine.buffer[0], length=256 << 20),
        line(op="local_read", offset=0, length=2**40),
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        b'{"op": "info", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        line(op="write", peer=engine.name, offset=-5, data_b64="AAAA"),
        line(op="read", peer=engine.name, offset=0, length=-1),
    ])
    after = footprint(engine.pid)
    got = engine.client.call("local_read", offset=SENTINEL_AT, length=len(SENTINEL))
    assert base64.b64decode(got["data_b64"]) == SENTINEL, "a value stored before the fuzz changed"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, f"{tried} inputs: {before} -> {after}"
    print(f"control port: {tried} inputs; engine before {before}, after {after}")


def test_an_over_long_line_is_refused_without_buffering_it(start_engine):
    engine = start_engine("--control-max-request", str(1 << 20))
    before = footprint(engine.pid)
    reply = exchange(engine.control, b"x" * (65 << 20) + b"\n")
    answer = json.loads(reply.data.split(b"\n")[0])
    assert answer["ok"] is False and "request longer than 1048576 bytes" in answer["error"]
    after = footprint(engine.pid)
    assert after.rss - before.rss < 16 << 20, (
        f"a 65 MiB line refused at 1 MiB took the engine from {before} to {after}")
    assert engine.client.call("info")["segment"] == engine.name


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_engine):
    engine = start_engine("--control-recv-timeout", "1")
    # the parent's own channel goes idle too and is closed: each call must reconnect
    print(crowd_is_dropped("engine control port", engine.pid, engine.control,
                           b'{"op": "info"',  # a request line that never ends
                           lambda: engine.client.call("info")["segment"] == engine.name))
