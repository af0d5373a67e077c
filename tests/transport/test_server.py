"""The server speaks Mooncake's framing to a raw socket and refuses anything outside its buffers."""

import logging
import random
import socket
import struct

import pytest
from rawsock import BASE, SIZE, recv_exact, recv_until_eof

from pytest_mooncake.waits import wait_until
from reference_engine.transport import wire

OK = wire.STATUS_OK_FRAME
REJ = wire.STATUS_REJECTED_FRAME


def hdr(op, addr, size, v=2):
    return wire.encode_header(op, addr, size, v)


def test_v2_write_is_acknowledged_after_it_is_applied(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.WRITE, BASE + 10, 5) + b"hello")
    assert recv_exact(s, 8) == OK
    assert server_peer.mem[10:15] == b"hello"


def test_v2_read_is_status_then_data(server_peer, raw):
    server_peer.mem[100:104] = b"data"
    s = raw()
    s.sendall(hdr(wire.READ, BASE + 100, 4))
    assert recv_exact(s, 12) == OK + b"data"


def test_pipelined_requests_are_served_in_order(server_peer, raw):
    server_peer.mem[0:4] = b"old!"
    s = raw()
    s.sendall(
        hdr(wire.READ, BASE, 4)
        + hdr(wire.WRITE, BASE, 4)
        + b"new!"
        + hdr(wire.READ, BASE, 4)
        + hdr(wire.WRITE, BASE + 4, 2)
        + b"xy"
    )
    # the first READ must not see the WRITE that follows it on the wire
    assert recv_exact(s, 12 + 8 + 12 + 8) == OK + b"old!" + OK + OK + b"new!" + OK


def test_padding_bytes_are_ignored(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.WRITE, BASE, 2)[:17] + b"\xee" * 7 + b"ok")
    assert recv_exact(s, 8) == OK
    assert server_peer.mem[:2] == b"ok"


def test_large_write_and_read_span_the_staging_buffer(server_peer, raw):
    payload = random.Random(7).randbytes(3 << 20)
    s = raw()
    s.sendall(
        hdr(wire.WRITE, BASE + 1, len(payload)) + payload + hdr(wire.READ, BASE + 1, len(payload))
    )
    got = recv_exact(s, 8 + 8 + len(payload))
    assert got[:16] == OK + OK
    assert got[16:] == payload
    assert server_peer.mem[1 : 1 + len(payload)] == payload


@pytest.mark.mc_req("MR-18")
@pytest.mark.parametrize("op", [wire.WRITE, wire.READ])
@pytest.mark.parametrize(
    "addr,size",
    [(BASE + SIZE - 4, 8), (BASE - 1, 4), (0x1000, 16), (BASE, 0), ((1 << 64) - 2, 4)],
    ids=["straddles-end", "below", "unregistered", "zero-size", "wraps"],
)
def test_out_of_range_is_rejected_and_closes_without_touching_memory(
    server_peer, raw, op, addr, size, caplog
):
    before = bytes(server_peer.mem)
    s = raw()
    body = b"\xaa" * size if op == wire.WRITE else b""
    with caplog.at_level(logging.WARNING, "reference_engine.transport"):
        s.sendall(hdr(op, addr, size) + body)
        assert recv_until_eof(s) == REJ
    assert bytes(server_peer.mem) == before
    assert "not within one registered buffer" in caplog.text
    assert "Traceback" not in caplog.text
    assert server_peer.t.server_stats().rejected == 1


def test_requests_behind_a_rejected_one_are_not_executed(server_peer, raw):
    s = raw()
    s.sendall(
        hdr(wire.WRITE, BASE, 1)
        + b"A"
        + hdr(wire.READ, 0x10, 1)
        + hdr(wire.WRITE, BASE + 1, 1)
        + b"B"
    )
    assert recv_until_eof(s) == OK + REJ
    assert server_peer.mem[:2] == b"A\x00"


def test_v1_framing_has_no_status_frames(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.WRITE, BASE, 3, v=1) + b"abc" + hdr(wire.READ, BASE, 3, v=1))
    assert recv_exact(s, 3) == b"abc"


def test_v1_rejection_is_a_bare_close(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.READ, 0x10, 4, v=1))
    assert recv_until_eof(s) == b""


def test_unknown_opcode_closes_with_one_log_line(server_peer, raw, caplog):
    s = raw()
    with caplog.at_level(logging.WARNING, "reference_engine.transport"):
        s.sendall(struct.pack("<QQB7x", 4, BASE, 0x82))
        assert recv_until_eof(s) == b""
    assert "malformed header: opcode byte 0x82" in caplog.text
    assert "Traceback" not in caplog.text
    s2 = raw()
    s2.sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(s2, 9)[:8] == OK


def test_truncated_header_is_logged_not_raised(server_peer, raw, caplog):
    s = raw()
    with caplog.at_level(logging.WARNING, "reference_engine.transport"):
        s.sendall(b"\x01" * 10)
        s.shutdown(socket.SHUT_WR)
        assert recv_until_eof(s) == b""
    assert "peer closed mid-request (10 of 24 bytes)" in caplog.text


@pytest.mark.mc_req("MR-18")
def test_unregistered_buffer_is_rejected_from_then_on(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(s, 9)[:8] == OK
    server_peer.t.unregister_buffer(BASE)
    s.sendall(hdr(wire.READ, BASE, 1))
    assert recv_until_eof(s) == REJ


def test_random_garbage_never_kills_the_server(server_peer, raw):
    rng = random.Random(1234)
    for _ in range(40):
        s = raw()
        s.sendall(rng.randbytes(rng.randrange(1, 300)))
        s.shutdown(socket.SHUT_WR)
        recv_until_eof(s)
        s.close()
    s = raw()
    s.sendall(hdr(wire.WRITE, BASE, 2) + b"ok")
    assert recv_exact(s, 8) == OK


def test_stop_closes_idle_connections(server_peer, raw):
    s = raw()
    s.sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(s, 9)[:8] == OK
    server_peer.t.stop()
    assert recv_until_eof(s) == b""
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server_peer.port), timeout=2)


@pytest.fixture
def limited_peer():
    """A server with room for two connections."""
    from reference_engine.hub import Limits
    from reference_engine.transport import TcpTransport

    t = TcpTransport(limits=Limits(recv_timeout=30.0, max_connections=2))
    mem = bytearray(64)
    t.register_buffer(BASE, memoryview(mem))
    port = t.start()
    socks = []

    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
        return s

    yield t, connect
    for s in socks:
        s.close()
    t.stop()


def test_at_the_limit_a_busy_server_refuses_new_peers_with_a_log_line(limited_peer, caplog):
    t, connect = limited_peer
    with caplog.at_level(logging.WARNING, "reference_engine.hub"):
        for _ in range(2):  # mid-request: busy, not idle
            connect().sendall(hdr(wire.READ, BASE, 1)[:10])
        wait_until(lambda: t.server.stats().connections == 2, 5, "both peers being served")
        extra = connect()
        assert recv_until_eof(extra) == b""
    assert "every connection is busy" in caplog.text
    assert t.server_stats().refused == 1


def test_at_the_limit_the_longest_idle_connection_makes_room(limited_peer):
    t, connect = limited_peer
    idle = []
    for _ in range(2):
        s = connect()
        s.sendall(hdr(wire.READ, BASE, 1))
        assert recv_exact(s, 9)[:8] == OK
        idle.append(s)
    wait_until(lambda: t.server.connections().active == 0, 5, "both connections parked")
    fresh = connect()
    fresh.sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(fresh, 9)[:8] == OK  # served, not refused
    assert recv_until_eof(idle[0]) == b""  # the longest idle was closed for it
    idle[1].sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(idle[1], 9)[:8] == OK
    assert (t.server_stats().evicted, t.server_stats().refused) == (1, 0)


def test_body_cut_off_by_the_peer_is_logged_and_not_acknowledged(server_peer, raw, caplog):
    s = raw()
    with caplog.at_level(logging.WARNING, "reference_engine.transport"):
        s.sendall(hdr(wire.WRITE, BASE, 1 << 20) + b"z" * 1000)
        s.shutdown(socket.SHUT_WR)
        assert recv_until_eof(s) == b""
    assert f"peer closed mid-body of WRITE 0x{BASE:x}+{1 << 20}" in caplog.text
    assert "Traceback" not in caplog.text
    s2 = raw()
    s2.sendall(hdr(wire.READ, BASE, 1))
    assert recv_exact(s2, 9)[:8] == OK
