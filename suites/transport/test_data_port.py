"""The TCP data port, as any target serves it: requests a peer sent before half-closing its side
are answered before the connection closes.

Mooncake's server reads a request, answers it, and only then reads the next, so a peer that
shuts down its write side after its last request (a client may, to say "no more") still gets
every READ's data and every v2 WRITE's acknowledgement, then end-of-stream. Measured on the
0.3.13 wheel: 20 of 20 READs and 20 of 20 WRITEs answered, v1 and v2.
"""

from __future__ import annotations

import pytest

from pytest_mooncake import tcp_wire
from pytest_mooncake.raw_peers import data_port_of, exchange

ROUNDS = 20

pytestmark = pytest.mark.mc_requires("engine")


@pytest.fixture
def data_port(mc_engine):
    """(engine, (host, port), first buffer address, framing version) of a fresh engine."""
    engine = mc_engine("seg-half-close")
    endpoint, version = data_port_of(engine)
    return engine, endpoint, engine.buffers()[0][0], version


def test_reads_sent_before_a_half_close_are_answered(data_port, mc_rng):
    engine, endpoint, base, version = data_port
    status = tcp_wire.STATUS_OK if version >= 2 else b""
    answered = []
    for i in range(ROUNDS):
        payload = mc_rng.randbytes(64)
        engine.local_write(64 * i, payload)
        reply = exchange(endpoint, tcp_wire.request(tcp_wire.READ, base + 64 * i, 64, version))
        answered.append(reply.data == status + payload)
    assert all(answered), (
        f"{answered.count(False)} of {ROUNDS} READs followed by a half-close got no (or a "
        f"wrong) answer from the data port {endpoint[0]}:{endpoint[1]} (v{version})")


def test_writes_sent_before_a_half_close_are_applied_and_acknowledged(data_port, mc_rng):
    engine, endpoint, base, version = data_port
    status = tcp_wire.STATUS_OK if version >= 2 else b""
    acked, applied = [], []
    for i in range(ROUNDS):
        payload = mc_rng.randbytes(64)
        reply = exchange(endpoint, tcp_wire.request(tcp_wire.WRITE, base + 64 * i, 64, version,
                                                    payload))
        acked.append(reply.data == status)
        applied.append(engine.local_read(64 * i, 64) == payload)
    assert all(applied), f"{applied.count(False)} of {ROUNDS} half-closed WRITEs not applied"
    assert all(acked), (
        f"{acked.count(False)} of {ROUNDS} WRITEs followed by a half-close were applied but "
        f"never acknowledged by {endpoint[0]}:{endpoint[1]} (v{version})")


def test_pipelined_requests_then_a_half_close_are_all_answered_in_order(data_port):
    engine, endpoint, base, version = data_port
    engine.local_write(0, b"before")
    ok = tcp_wire.STATUS_OK if version >= 2 else b""
    reply = exchange(endpoint, tcp_wire.request(tcp_wire.READ, base, 6, version)
                     + tcp_wire.request(tcp_wire.WRITE, base, 5, version, b"after")
                     + tcp_wire.request(tcp_wire.READ, base, 6, version))
    assert reply.data == ok + b"before" + ok + ok + b"aftere", (
        f"READ, WRITE, READ then a half-close: {reply.data!r} ({reply.end}); expected every "
        f"answer, in order")
