"""The relay between loopback and the container network: bytes pass both ways, and a cut on
one side is a cut on the other (what the fault proxy does reaches the container)."""

from __future__ import annotations

import socket
import threading

from pytest_mooncake.container_engine.tcp_relay import TcpRelay
from pytest_mooncake.targets.mooncake.placements.containers import mac_for


def _server():
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve():
        conn, _ = listener.accept()
        accepted.append(conn)
        while data := conn.recv(65536):
            conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return listener, accepted


def test_bytes_pass_both_ways_and_a_cut_upstream_cuts_the_client():
    listener, accepted = _server()
    relay = TcpRelay("127.0.0.1", listener.getsockname())
    host, _, port = relay.address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.sendall(b"through the relay")
            assert client.recv(100) == b"THROUGH THE RELAY"
            accepted[0].shutdown(socket.SHUT_RDWR)  # the proxy cuts the connection
            assert client.recv(100) == b""
    finally:
        relay.close()
        listener.close()


def test_a_refused_upstream_is_refused_to_the_client():
    spare = socket.create_server(("127.0.0.1", 0))
    target = spare.getsockname()
    spare.close()  # nothing listens there now
    relay = TcpRelay("127.0.0.1", target)
    host, _, port = relay.address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.settimeout(10)
            assert client.recv(100) == b""
    finally:
        relay.close()


def test_mac_is_fixed_by_the_address_and_locally_administered():
    assert mac_for("198.19.240.3") == "02:42:c6:13:f0:03"
    assert int(mac_for("198.19.240.3").split(":")[0], 16) & 0b10
