"""The RDMA handshake over real loopback sockets in Mooncake's framing."""

import socket
import struct
import time

import pytest

from reference_engine.rdma.handshake_rpc import (
    CONNECTION,
    PROBE,
    HandshakeError,
    HandshakeServer,
    send,
)
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.verbs import Opcode


@pytest.fixture
def server():
    seen = []
    srv = HandshakeServer(lambda req: (seen.append(req), {"qp_num": [1], "reply_msg": ""})[1])
    srv.seen = seen
    yield srv
    srv.close()


def test_connection_and_probe_round_trip(server):
    reply = send(server.address, CONNECTION, {"local_nic_path": "A@n0", "qp_num": [7]})
    assert reply == {"qp_num": [1], "reply_msg": ""}
    assert server.seen == [{"local_nic_path": "A@n0", "qp_num": [7]}]
    assert send(server.address, PROBE, {}) == {"status": "success"}


@pytest.mark.parametrize("raw", [
    struct.pack("<Q", 0),
    struct.pack("<Q", (1 << 20) + 1) + b"\x00",
    struct.pack("<Q", 5) + b"\x00{bad",
    struct.pack("<Q", 3) + b"\x09{}",
])
def test_malformed_frames_are_refused_and_the_server_keeps_serving(server, raw):
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(raw)
        sock.settimeout(5)
        try:
            assert sock.recv(16) == b"", "a malformed request got an answer"
        except ConnectionResetError:
            pass
    deadline = time.monotonic() + 5
    while server.rejected < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.rejected == 1
    assert send(server.address, PROBE, {}) == {"status": "success"}


def test_unreachable_peer_is_a_handshake_error():
    srv = HandshakeServer(lambda req: {})
    address = srv.address
    srv.close()
    with pytest.raises(HandshakeError):
        send(address, PROBE, {}, connect_timeout=1, recv_timeout=1)


def test_transfer_with_handshakes_over_tcp():
    cluster = SimCluster("rfc", tcp_handshake=True, slice_size=4096)
    try:
        a = cluster.add_node("A", ["n0", "n1"])
        b = cluster.add_node("B", ["n0", "n1"])
        a.write(0, b"over tcp" * 1024)
        cluster.start()
        task = a.transport.submit("B", [(Opcode.RDMA_WRITE, a.buffer_addr, 8192, b.buffer_addr)])
        deadline = time.monotonic() + 20
        while not task.done and time.monotonic() < deadline:
            time.sleep(0.002)
        assert task.status() == "COMPLETED"
        assert b.read(0, 8192) == b"over tcp" * 1024
        assert len(cluster.servers) == 2
    finally:
        cluster.close()
