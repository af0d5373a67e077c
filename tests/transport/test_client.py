"""The client: pipelined batches, what each failure is called, and the connection pool."""

import random
import socket
import threading

import pytest
from rawsock import BASE, SIZE, recv_exact

from reference_engine.transport import (
    PeerRejectedError,
    ProtocolError,
    TransferConnectionError,
    wire,
)

H = "127.0.0.1"


def test_write_then_read_roundtrip(server_peer, client):
    client.write(H, server_peer.port, BASE + 3, b"abc")
    assert client.read(H, server_peer.port, BASE + 3, 3) == b"abc"
    assert server_peer.mem[3:6] == b"abc"


def test_batches_cross_windows_and_keep_order(server_peer, client):
    rng = random.Random(5)
    items = [(BASE + 4096 * i, rng.randbytes(rng.randrange(1, 4097))) for i in range(600)]
    client.write_batch(H, server_peer.port, items)
    back = client.read_batch(H, server_peer.port, [(a, len(d)) for a, d in items])
    assert back == [d for _, d in items]
    assert client.pool.opened == 1  # small requests: one pipelined connection, reused


def test_read_batch_into_lands_in_the_callers_buffers(server_peer, client):
    server_peer.mem[: 1 << 20] = random.Random(1).randbytes(1 << 20)
    local = bytearray(1 << 20)
    lv = memoryview(local)
    client.read_batch_into(
        H,
        server_peer.port,
        [(BASE + off, lv[off : off + 65536]) for off in range(0, 1 << 20, 65536)],
    )
    assert local == server_peer.mem[: 1 << 20]


def test_large_transfers(server_peer, client):
    payload = random.Random(2).randbytes(3 << 20)
    client.write(H, server_peer.port, BASE, payload)
    assert client.read(H, server_peer.port, BASE, len(payload)) == payload


def test_rejected_item_fails_alone_and_the_rest_of_the_batch_lands(server_peer, client):
    items = [
        (BASE, b"a"),
        (BASE + SIZE - 1, b"xx"),
        (BASE + 1, b"b"),
        (0x10, b"c"),
        (BASE + 2, b"c"),
    ]
    with pytest.raises(PeerRejectedError) as ei:
        client.write_batch(H, server_peer.port, items)
    assert sorted(ei.value.failures) == [1, 3]
    assert all(isinstance(e, PeerRejectedError) for e in ei.value.failures.values())
    assert ei.value.completed == 3
    assert ei.value.failures[1].remote_addr == BASE + SIZE - 1
    assert server_peer.mem[:3] == b"abc"
    assert server_peer.mem[SIZE - 1] == 0


def test_rejected_read_in_batch(server_peer, client):
    server_peer.mem[:2] = b"xy"
    with pytest.raises(PeerRejectedError) as ei:
        client.read_batch(H, server_peer.port, [(BASE, 1), (BASE - 8, 8), (BASE + 1, 1)])
    assert list(ei.value.failures) == [1]


def test_large_rejected_write_is_still_reported_as_rejection(server_peer, client):
    # the server closes at the header while megabytes are still being sent: the client must
    # find the rejection frame that arrived before the reset
    with pytest.raises(PeerRejectedError):
        client.write(H, server_peer.port, BASE + SIZE - 10, bytes(16 << 20))


def test_connection_refused_is_a_connection_error(client):
    s = socket.socket()
    s.bind((H, 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(TransferConnectionError) as ei:
        client.write_batch(H, port, [(1, b"a"), (2, b"b")])
    assert not isinstance(ei.value, PeerRejectedError)
    assert sorted(ei.value.failures) == [0, 1]


def test_peer_closing_mid_response_is_a_connection_error(client, fake_peer):
    def half_answer(sock):
        recv_exact(sock, 24)
        sock.sendall(wire.STATUS_OK_FRAME + b"ab")

    port = fake_peer(half_answer)
    with pytest.raises(TransferConnectionError, match="closed the connection mid-response"):
        client.read(H, port, 0x1000, 4)
    assert client.pool.idle_count(H, port) == 0


def test_write_never_acknowledged_is_a_connection_error(client, fake_peer):
    port = fake_peer(lambda sock: recv_exact(sock, 24 + 4))
    with pytest.raises(TransferConnectionError, match="before acknowledging"):
        client.write(H, port, 0x1000, b"abcd")


def test_v1_only_peer_is_a_protocol_error(client, fake_peer):
    def v1_server(sock):
        size = wire.decode_header(recv_exact(sock, 24)).size
        sock.sendall(b"Z" * size)

    port = fake_peer(v1_server)
    with pytest.raises(ProtocolError, match="not a status frame"):
        client.read(H, port, 0x1000, 16)


def test_v1_client_framing(server_peer, client):
    client.write(H, server_peer.port, BASE, b"v1", proto_version=1)
    assert client.read(H, server_peer.port, BASE, 2, proto_version=1) == b"v1"
    with pytest.raises(TransferConnectionError):
        client.read(H, server_peer.port, 0x10, 2, proto_version=1)


def test_zero_length_completes_without_a_connection(client):
    client.write(H, 1, 0x1000, b"")
    client.write_batch(H, 1, [(0x1000, b"")])
    assert client.pool.opened == 0


def test_drop_peer_closes_idle_and_retires_busy_connections(server_peer, client):
    client.write(H, server_peer.port, BASE, b"a")
    assert client.pool.idle_count(H, server_peer.port) == 1
    assert client.drop_peer(H, server_peer.port) == 1
    assert client.pool.idle_count(H, server_peer.port) == 0
    busy = client.pool.acquire(H, server_peer.port)
    client.drop_peer(H, server_peer.port)
    client.pool.release(busy, healthy=True)
    assert client.pool.idle_count(H, server_peer.port) == 0
    client.write(H, server_peer.port, BASE, b"b")
    assert client.pool.opened == 3


def test_failed_pooled_connection_is_not_silently_replayed(server_peer, client):
    client.write(H, server_peer.port, BASE, b"a")
    server_peer.t.stop()
    with pytest.raises(TransferConnectionError):
        client.write(H, server_peer.port, BASE, b"b")
    assert client.pool.idle_count(H, server_peer.port) == 0


def test_readonly_destination_is_refused(client):
    with pytest.raises(TypeError, match="read-only"):
        client.read_into(H, 1, 0x1000, b"abcd")


def test_concurrent_batches_from_threads(server_peer, client):
    errors = []

    def worker(k):
        try:
            items = [(BASE + k * 65536 + 256 * i, bytes([k]) * 256) for i in range(200)]
            for _ in range(5):
                client.write_batch(H, server_peer.port, items)
                got = client.read_batch(H, server_peer.port, [(a, 256) for a, _ in items])
                assert got == [d for _, d in items]
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_batches_match_a_model(server_peer, client, seed):
    rng = random.Random(seed)
    model = bytearray(SIZE)
    for _ in range(15):
        items, expect_rejected = [], set()
        for i in range(rng.randrange(1, 60)):
            size = rng.choice([1, 7, 512, 4096, 70000])
            off = rng.randrange(-size, SIZE + 10)
            items.append((BASE + off, rng.randbytes(size)))
            if off < 0 or off + size > SIZE:
                expect_rejected.add(i)
        try:
            client.write_batch(H, server_peer.port, items)
            rejected = set()
        except PeerRejectedError as e:
            rejected = set(e.failures)
        assert rejected == expect_rejected
        for i, (addr, data) in enumerate(items):
            if i not in rejected:
                model[addr - BASE : addr - BASE + len(data)] = data
        assert server_peer.mem == model


@pytest.mark.parametrize("addr", [-1, 1 << 64, (1 << 64) - 2, "0x10"])
def test_addresses_outside_u64_are_refused_before_sending(client, addr):
    with pytest.raises(ValueError, match="request 1: remote address"):
        client.write_batch(H, 1, [(0x10, b"ok"), (addr, b"abcd")])
    assert client.pool.opened == 0


def test_big_disjoint_batches_use_lanes_and_merge_failures(server_peer, client):
    assert client.client.lanes == 2
    client.client.LANE_MIN_MEAN_BYTES = 8192  # these requests count as big
    items = [(BASE + 8192 * i, bytes([i % 251]) * 8192) for i in range(64)]
    items[50] = (BASE + SIZE, b"x" * 8192)  # rejected, in the second lane
    with pytest.raises(PeerRejectedError) as ei:
        client.write_batch(H, server_peer.port, items)
    assert list(ei.value.failures) == [50]
    assert ei.value.completed == 63
    assert client.pool.opened >= 2
    for i, (addr, data) in enumerate(items):
        if i != 50:
            assert server_peer.mem[addr - BASE : addr - BASE + 8192] == data


def test_batches_of_small_requests_stay_on_one_lane_big_ones_split(server_peer, client,
                                                                   monkeypatch):
    # which parts the batch runs as, not how many connections it opened: a fast lane may finish
    # and return its connection to the pool before the other lane asks for one
    from reference_engine.transport.tcp_client import TcpClient

    parts = []
    run_lane = TcpClient._run_lane

    def spy(self, host, port, reqs, op, proto):
        parts.append(len(reqs))
        return run_lane(self, host, port, reqs, op, proto)

    monkeypatch.setattr(TcpClient, "_run_lane", spy)
    small = [(BASE + 65536 * i, bytes([i]) * 65536) for i in range(48)]       # 3 MiB
    client.write_batch(H, server_peer.port, small)
    assert parts == [48]
    parts.clear()
    big = [(BASE + (SIZE // 32) * i, bytes([i]) * (SIZE // 32)) for i in range(32)]  # 128 KiB
    client.client.LANE_MIN_MEAN_BYTES = SIZE // 32
    client.write_batch(H, server_peer.port, big)
    assert sorted(parts) == [16, 16]
    assert bytes(server_peer.mem[: SIZE // 32]) == bytes([0]) * (SIZE // 32)
    assert bytes(server_peer.mem[-(SIZE // 32):]) == bytes([31]) * (SIZE // 32)


def test_overlapping_write_batch_stays_ordered(server_peer, client):
    items = [(BASE + 1024 * (i % 8), bytes([i]) * 8192) for i in range(64)]
    client.write_batch(H, server_peer.port, items)
    assert client.pool.opened == 1
    expected = bytearray(16384)
    for addr, data in items:
        expected[addr - BASE : addr - BASE + len(data)] = data
    assert server_peer.mem[:16384] == expected


def test_rejection_is_found_even_when_the_send_fails(fake_peer):
    """The peer rejects and closes while the client is still blocked sending a big window of
    headers: the rejection frame that came first must win over the send error."""
    from reference_engine.transport import TcpTransport

    connections = []

    def serve(sock):
        connections.append(sock)
        if len(connections) == 1:
            size = wire.decode_header(recv_exact(sock, 24)).size
            sock.sendall(wire.STATUS_OK_FRAME + b"r" * size)
            recv_exact(sock, 24)
            sock.sendall(wire.STATUS_REJECTED_FRAME)
            return  # closes with unread headers: the client's send fails with a reset
        pending = b""
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            pending += chunk
            whole = len(pending) // 24 * 24
            out = [
                wire.STATUS_OK_FRAME + b"s" * wire.decode_header(pending, i).size
                for i in range(0, whole, 24)
            ]
            pending = pending[whole:]
            sock.sendall(b"".join(out))

    port = fake_peer(serve, rcvbuf=4096)
    n = 20_000  # ~480 KB of headers in one window, far more than the small buffers hold
    t = TcpTransport(window=n, lanes=1)
    acquire = t.pool.acquire

    def small_send_buffer(host, port):
        conn = acquire(host, port)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        return conn

    t.pool.acquire = small_send_buffer
    try:
        with pytest.raises(PeerRejectedError) as ei:
            t.read_batch(H, port, [(0x1000 + i, 1) for i in range(n)])
        assert list(ei.value.failures) == [1]
        assert ei.value.completed == n - 1
    finally:
        t.stop()
