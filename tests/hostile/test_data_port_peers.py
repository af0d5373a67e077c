"""The engine's TCP data port against hostile, half-closing and idle peers (issue 14).

Every input is sent, then the peer half-closes and reads until the server closes, so a request
the server leaves unanswered shows as a wrong reply, and one it never finishes as a hang.
"""

from __future__ import annotations

import base64
import tracemalloc
from dataclasses import dataclass

from hostile import (
    RSS_GROWTH_LIMIT,
    crowd_is_dropped,
    footprint,
    fuzz,
)
from hypothesis import strategies as st

from pytest_mooncake import tcp_wire
from pytest_mooncake.raw_peers import exchange
from reference_engine.transport import PeerRejectedError, TcpTransport

SCRATCH = 64 << 10
"""Fuzzed writes land in the first SCRATCH bytes of the engine's buffer."""
BUFFER = 1 << 20
SENTINEL_AT = BUFFER - 4096
SENTINEL = b"stored before the fuzz; must survive it " * 16
UNKNOWN_OPCODES = [0x02, 0x7F, 0x82, 0xFF]


@dataclass(frozen=True)
class Req:
    op: int           # READ, WRITE or an unknown opcode byte
    version: int
    where: str        # inside | outside | below | zero | huge | wrap
    offset: int
    size: int
    seed: int         # WRITE body bytes


@dataclass(frozen=True)
class Case:
    reqs: tuple[Req, ...] = ()
    cut: int = 0      # bytes cut off the end of the last request (a truncated stream)
    garbage: bytes = b""


def _req() -> st.SearchStrategy[Req]:
    size = st.integers(1, 4096)
    return st.builds(
        Req,
        op=st.sampled_from([tcp_wire.READ, tcp_wire.WRITE] * 4 + UNKNOWN_OPCODES),
        version=st.sampled_from([1, 2, 2]),
        where=st.sampled_from(["inside"] * 6 + ["outside", "below", "zero", "huge", "wrap"]),
        offset=st.integers(0, SCRATCH - 1),
        size=size,
        seed=st.integers(0, 255))


CASES = st.one_of(
    st.builds(Case, reqs=st.lists(_req(), min_size=1, max_size=6).map(tuple),
              cut=st.one_of(st.just(0), st.just(0), st.integers(1, 40))),
    st.builds(Case, garbage=st.binary(min_size=1, max_size=300)),
)


def _wire(req: Req, base: int) -> tuple[int, int, bytes]:
    """(address, size, body) of a request as sent."""
    if req.where == "inside":
        size = min(req.size, SCRATCH - req.offset)
        return base + req.offset, size, bytes([req.seed]) * size
    addr, size = {
        "outside": (base + BUFFER + req.offset, req.size),
        "below": (base - req.size, req.size),
        "zero": (base + req.offset, 0),
        "huge": (base, 1 << 40),
        "wrap": ((1 << 64) - 2, 4),
    }[req.where]
    return addr, size, b""


def _expected(case: Case, base: int, memory: bytearray) -> tuple[bytes, bytes]:
    """(bytes to send, the reply Mooncake's framing demands), updating ``memory`` (the scratch
    region) as the WRITEs would. Requests after a rejected or malformed one are not sent: the
    server closes there, and unread bytes would turn its close into a reset."""
    payload, reply = bytearray(), bytearray()
    ok = tcp_wire.STATUS_OK
    for i, req in enumerate(case.reqs):
        addr, size, body = _wire(req, base)
        last = i == len(case.reqs) - 1 or req.op not in (tcp_wire.READ, tcp_wire.WRITE) \
            or req.where != "inside"
        if req.op not in (tcp_wire.READ, tcp_wire.WRITE):
            payload += tcp_wire.request(tcp_wire.READ, addr, size, req.version)[:16] + \
                bytes([req.op]) + b"\0" * 7
            break
        wire = tcp_wire.request(req.op, addr, size, req.version,
                                body if req.where == "inside" and req.op == tcp_wire.WRITE
                                else b"")
        if last and case.cut:
            payload += wire[:max(1, len(wire) - case.cut)]
            break  # a truncated request is not executed (nor answered)
        payload += wire
        status = ok if req.version >= 2 else b""
        if req.where != "inside":
            reply += tcp_wire.STATUS_REJECTED if req.version >= 2 else b""
            break
        off = addr - base
        if req.op == tcp_wire.WRITE:
            memory[off:off + size] = body
            reply += status
        else:
            reply += status + memory[off:off + size]
        if last:
            break
    return bytes(payload), bytes(reply)


def _scratch(engine) -> bytearray:
    got = engine.client.call("local_read", offset=0, length=SCRATCH)["data_b64"]
    return bytearray(base64.b64decode(got))


def _plant_sentinel(engine) -> None:
    engine.client.call("local_write", offset=SENTINEL_AT,
                       data_b64=base64.b64encode(SENTINEL).decode())


def _sentinel(engine) -> bytes:
    got = engine.client.call("local_read", offset=SENTINEL_AT, length=len(SENTINEL))
    return base64.b64decode(got["data_b64"])


def test_fuzzed_requests_get_mooncakes_answers_and_lose_nothing(start_engine, mc_seed):
    engine = start_engine(buffer_size=BUFFER)
    base = engine.buffer[0]
    _plant_sentinel(engine)
    before = footprint(engine.pid)

    def check(case: Case) -> None:
        if case.garbage:
            exchange(engine.data, case.garbage)  # any answer, but an answer and a close
            return
        payload, expected = _expected(case, base, _scratch(engine))
        reply = exchange(engine.data, payload)
        assert reply.data == expected, (
            f"{case}: the data port answered {reply.data[:64]!r}... ({len(reply.data)} bytes, "
            f"{reply.end}); Mooncake's framing demands {expected[:64]!r}... ({len(expected)})")

    read = Req(tcp_wire.READ, 2, "inside", 0, 64, 0)
    write = Req(tcp_wire.WRITE, 2, "inside", 128, 64, 7)
    tried = fuzz(mc_seed, CASES, check, explicit=[
        Case((read,)), Case((write,)), Case((write, read, write)),  # then a half-close
        Case((Req(tcp_wire.READ, 2, "huge", 0, 1, 0),)),
        Case((Req(tcp_wire.WRITE, 2, "inside", 0, 4096, 1),), cut=3)])
    after = footprint(engine.pid)
    assert _sentinel(engine) == SENTINEL, "a value stored before the fuzz changed"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, (
        f"{tried} inputs grew the engine from {before} to {after}")
    print(f"data port: {tried} inputs; engine before {before}, after {after}")


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_engine):
    engine = start_engine("--data-recv-timeout", "1", buffer_size=BUFFER)
    base = engine.buffer[0]
    _plant_sentinel(engine)
    read = tcp_wire.request(tcp_wire.READ, base + SENTINEL_AT, len(SENTINEL), 2)
    # stalled: a WRITE header announcing a body that never comes
    print(crowd_is_dropped(
        "engine data port", engine.pid, engine.data,
        tcp_wire.request(tcp_wire.WRITE, base, 1 << 20, 2) + b"x" * 100,
        lambda: exchange(engine.data, read).data == tcp_wire.STATUS_OK + SENTINEL))


def test_a_rejected_read_costs_no_memory(start_engine):
    """The reader allocates a read's destination only after the peer accepted it."""
    engine = start_engine(buffer_size=BUFFER)
    outside = engine.buffer[0] + BUFFER
    with TcpTransport() as reader:
        tracemalloc.start()
        try:
            for length in (256 << 20, 1 << 40):
                try:
                    reader.read(*engine.data, outside, length)
                except PeerRejectedError:
                    pass
                else:
                    raise AssertionError(f"a read of {length} bytes outside the buffer succeeded")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 1 << 20, f"two rejected reads (256 MiB, 1 TiB) allocated {peak} bytes"
