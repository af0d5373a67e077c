"""Each toxic, driven through toxiproxy-python, does what Toxiproxy documents, on real sockets.

Timing assertions are only lower bounds a toxic's semantics promise (latency adds at least its
delay, bandwidth takes at least N/rate); waits for "nothing happens" use a socket timeout.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from toxi_net import connect, recv_exact, recv_to_eof

from pytest_mooncake.waits import wait_until


def roundtrip(sock: socket.socket, payload: bytes) -> tuple[bytes, float]:
    """Send ``payload`` (from a thread, so a large one cannot deadlock against the echo) and
    read it back: (data, seconds)."""
    start = time.monotonic()
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    try:
        data = recv_exact(sock, len(payload))
    finally:
        sender.join(timeout=30)
    return data, time.monotonic() - start


def test_no_toxic_passes_data_both_ways(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("plain", echo.address)
    with connect(addr) as sock:
        assert roundtrip(sock, b"hello")[0] == b"hello"
        payload = bytes(range(256)) * 4096
        assert roundtrip(sock, payload)[0] == payload
    assert echo.wait_received(0, len(payload) + 5) == b"hello" + payload


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_delays_at_least_the_latency(mc_faults, echo, stream) -> None:
    proxy, addr = mc_faults.proxy("lat", echo.address)
    proxy.add_toxic(type="latency", stream=stream, attributes={"latency": 300, "jitter": 0})
    with connect(addr) as sock:
        data, elapsed = roundtrip(sock, b"ping")
    assert data == b"ping"
    assert elapsed >= 0.3


def test_latency_with_jitter_delays_at_least_latency_minus_jitter(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("jit", echo.address)
    proxy.add_toxic(type="latency", attributes={"latency": 200, "jitter": 50})
    with connect(addr) as sock:
        for _ in range(3):
            data, elapsed = roundtrip(sock, b"ping")
            assert data == b"ping" and elapsed >= 0.15


def test_toxic_added_to_a_live_connection_applies_and_removal_lifts_it(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("live", echo.address)
    with connect(addr) as sock:
        assert roundtrip(sock, b"a")[0] == b"a"
        proxy.add_toxic(type="latency", attributes={"latency": 300})
        data, elapsed = roundtrip(sock, b"b")
        assert data == b"b" and elapsed >= 0.3
        proxy.destroy_toxic("latency_downstream")
        proxy.add_toxic(type="limit_data", attributes={"bytes": 2})
        sock.sendall(b"xyz")
        assert recv_to_eof(sock) == b"xy"


def test_timeout_stalls_then_closes(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("to", echo.address)
    proxy.add_toxic(type="timeout", attributes={"timeout": 400})
    start = time.monotonic()
    with connect(addr) as sock:
        sock.sendall(b"lost")
        data = recv_to_eof(sock)
    assert data == b"", "a timeout toxic drops the data"
    assert time.monotonic() - start >= 0.4
    assert echo.wait_received(0, 4) == b"lost", "upstream data still flows (toxic is downstream)"


def test_timeout_zero_holds_until_removed_then_closes(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("hold", echo.address)
    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    with connect(addr, timeout=1.0) as sock:
        sock.sendall(b"held")
        with pytest.raises(socket.timeout):
            sock.recv(10)  # neither data nor close within a second: held open
        sock.settimeout(10.0)
        proxy.destroy_toxic("timeout_downstream")
        assert recv_to_eof(sock) == b"", "removing a timeout toxic closes its connections"


def test_timeout_upstream_blackholes_what_the_client_sends(mc_faults, make_upstream) -> None:
    upstream = make_upstream(greeting=b"HI")
    proxy, addr = mc_faults.proxy("bh", upstream.address)
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    with connect(addr) as sock:
        assert recv_exact(sock, 2) == b"HI", "downstream is untouched"
        sock.sendall(b"into the void")
        assert upstream.wait_received(0, 1, timeout=0.5) == b""


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_reset_peer_resets_the_connection(mc_faults, echo, stream) -> None:
    proxy, addr = mc_faults.proxy("rst", echo.address)
    proxy.add_toxic(type="reset_peer", stream=stream, attributes={"timeout": 0})
    with connect(addr) as sock:
        sock.sendall(b"boom")
        with pytest.raises(ConnectionResetError):
            recv_to_eof(sock)


def test_reset_peer_waits_its_timeout_first(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("rst2", echo.address)
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 300})
    with connect(addr) as sock:
        start = time.monotonic()
        sock.sendall(b"boom")
        with pytest.raises(ConnectionResetError):
            recv_to_eof(sock)
        assert time.monotonic() - start >= 0.3


def test_bandwidth_caps_the_rate(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("bw", echo.address)
    rate_kb = 200  # KB/s, 1 KB = 1000 bytes as Toxiproxy counts
    proxy.add_toxic(type="bandwidth", attributes={"rate": rate_kb})
    payload = b"x" * 100_000
    with connect(addr) as sock:
        data, elapsed = roundtrip(sock, payload)
    assert data == payload
    assert elapsed >= len(payload) / (rate_kb * 1000)


def test_slicer_splits_writes_into_several_reads(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("slice", echo.address)
    proxy.add_toxic(type="slicer", attributes={"average_size": 100, "size_variation": 20,
                                               "delay": 20_000})
    payload = bytes(range(250)) * 4
    with connect(addr) as sock:
        sock.sendall(payload)
        reads = []
        while sum(map(len, reads)) < len(payload):
            data = sock.recv(65536)
            assert data, "connection closed early"
            reads.append(data)
    assert b"".join(reads) == payload
    assert len(reads) >= 2, "the slicer should deliver the 1000 bytes in several pieces"


def test_limit_data_closes_after_n_bytes(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("limit", echo.address)
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    with connect(addr) as sock:
        sock.sendall(b"0123456789abcdefghij")
        assert recv_to_eof(sock) == b"0123456789"


def test_limit_data_direction_decides_which_side_is_cut(mc_faults, make_upstream) -> None:
    upstream = make_upstream(greeting=b"WELCOME\n", mode="sink")
    proxy, addr = mc_faults.proxy("dir", upstream.address)
    proxy.add_toxic(type="limit_data", stream="upstream", attributes={"bytes": 3})
    with connect(addr) as sock:
        assert recv_exact(sock, 8) == b"WELCOME\n", "downstream passes whole"
        sock.sendall(b"hello")
        assert upstream.wait_received(0, 3) == b"hel", "upstream is cut after 3 bytes"
        assert recv_to_eof(sock) == b"", "then the connection closes"
    proxy.destroy_toxic("limit_data_upstream")
    proxy.add_toxic(type="limit_data", stream="downstream", attributes={"bytes": 3})
    with connect(addr) as sock:
        assert recv_to_eof(sock) == b"WEL"


def test_slow_close_delays_the_close(mc_faults, make_upstream) -> None:
    upstream = make_upstream(greeting=b"bye", mode="close")
    proxy, addr = mc_faults.proxy("slow", upstream.address)
    proxy.add_toxic(type="slow_close", attributes={"delay": 400})
    start = time.monotonic()
    with connect(addr) as sock:
        assert recv_to_eof(sock) == b"bye"
    assert time.monotonic() - start >= 0.4


def test_disable_refuses_and_drops_then_enable_restores(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("down", echo.address)
    with connect(addr) as live:
        assert roundtrip(live, b"up")[0] == b"up"
        proxy.disable()
        assert recv_to_eof(live) == b"", "existing connections are dropped"
    with pytest.raises(ConnectionRefusedError):
        connect(addr)
    proxy.enable()
    with connect(addr) as sock:
        assert roundtrip(sock, b"again")[0] == b"again"


def test_down_context_manager(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("ctx", echo.address)
    with proxy.down():
        with pytest.raises(ConnectionRefusedError):
            connect(addr)
    with connect(addr) as sock:
        assert roundtrip(sock, b"ok")[0] == b"ok"


def test_toxicity_zero_never_applies(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("tox0", echo.address)
    proxy.add_toxic(type="limit_data", toxicity=0.0, attributes={"bytes": 1})
    for _ in range(20):
        with connect(addr) as sock:
            assert roundtrip(sock, b"intact")[0] == b"intact"


def _cut_pattern(mc_faults, upstream: str, connections: int) -> list[bool]:
    proxy, addr = mc_faults.proxy("half", upstream)
    proxy.add_toxic(type="limit_data", toxicity=0.5, attributes={"bytes": 1})
    pattern = []
    for _ in range(connections):
        with connect(addr) as sock:
            sock.sendall(b"ab")
            pattern.append(recv_exact(sock, 2) == b"a")
    proxy.destroy()
    return pattern


def test_partial_toxicity_hits_some_connections_reproducibly(mc_faults, echo) -> None:
    first = _cut_pattern(mc_faults, echo.address, 24)
    assert True in first and False in first, first
    assert _cut_pattern(mc_faults, echo.address, 24) == first, "same seed, same draws"


def test_unreachable_upstream_closes_the_client(mc_faults) -> None:
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        proxy, addr = mc_faults.proxy("nowhere", f"127.0.0.1:{port}")
        sock = connect(addr)
    with sock:
        try:
            assert sock.recv(10) == b""
        except ConnectionResetError:
            pass


def test_large_transfer_through_a_slow_toxic_chain_is_intact(mc_faults, echo) -> None:
    proxy, addr = mc_faults.proxy("chain", echo.address)
    proxy.add_toxic(type="latency", name="lat", attributes={"latency": 20})
    proxy.add_toxic(type="slicer", name="sl", attributes={"average_size": 60000,
                                                          "size_variation": 1000})
    proxy.add_toxic(type="bandwidth", name="bw", stream="upstream", attributes={"rate": 20000})
    payload = bytes(range(256)) * 16384  # 4 MiB
    with connect(addr) as sock:
        data, elapsed = roundtrip(sock, payload)
    assert data == payload
    assert elapsed >= len(payload) / 20_000_000


def test_connections_leave_no_sockets_behind_in_the_server(mc_faults, mc_toxiproxy,
                                                           echo) -> None:
    if not mc_toxiproxy.owned:
        pytest.skip("counts the embedded server's file descriptors")
    fd_dir = f"/proc/{mc_toxiproxy.process.pid}/fd"
    proxy, addr = mc_faults.proxy("fds", echo.address)
    baseline = len(os.listdir(fd_dir))
    for i in range(60):
        if i == 20:
            proxy.add_toxic(type="limit_data", attributes={"bytes": 2})
        if i == 40:
            proxy.destroy_toxic("limit_data_downstream")
            proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
        with connect(addr) as sock:
            sock.sendall(b"abc")
            try:
                recv_to_eof(sock) if i >= 20 else recv_exact(sock, 3)
            except ConnectionResetError:
                pass
    wait_until(lambda: len(os.listdir(fd_dir)) <= baseline, 10,
               f"the server's fds to return to {baseline}",
               describe=lambda _: str(len(os.listdir(fd_dir))))
