"""Harness fault of #12: a 0.3.11/0.3.12 writer publishes no ``tcp_data_host``, and the
reference reader connected to the segment *name* as a host ("cannot connect to seg-w:16371:
Name or service not known"), so MR-8/MR-17 read FAIL for a fault of ours. A real reader takes
the host from the segment's RPC entry (``mooncake/rpc_meta/<segment>``, ``ip_or_host_name``) and
the port from ``tcp_data_port``; the reference reader now does the same."""

from __future__ import annotations

import contextlib
import json
import socket
import threading

from pytest_mooncake.waits import wait_until
from reference_engine.descriptor import decode, encode
from reference_engine.metadata import KeyLayout
from reference_engine.profiles import RFC
from reference_engine.transport import wire
from reference_engine.transport.wire import HEADER_SIZE

KEYS = KeyLayout()


def as_0_3_12(store, segment: str) -> dict:
    """Rewrite ``segment``'s published descriptor the way 0.3.12 writes it: no tcp_data_host,
    no rdma_server_name, no instance_id (0.3.11 also drops tcp_proto_version)."""
    doc = json.loads(store.get(KEYS.segment_key(segment)))
    for field in ("tcp_data_host", "rdma_server_name", "instance_id"):
        doc.pop(field, None)
    store.put(KEYS.segment_key(segment), json.dumps(doc).encode())
    return doc


def test_reader_takes_the_host_from_the_rpc_entry_not_the_segment_name(store, engines):
    writer, reader = engines("seg-w"), engines("seg-r")
    doc = as_0_3_12(store, "seg-w")
    assert "tcp_data_host" not in doc and decode(store.get(KEYS.segment_key("seg-w"))).is_legacy
    out = reader.write("seg-w", 0, b"to a 0.3.12 writer")
    assert out.ok, out.error
    assert writer.local_read(0, 18) == b"to a 0.3.12 writer"
    assert reader.read("seg-w", 0, 18).data == b"to a 0.3.12 writer"


def test_0_3_11_form_without_proto_version_transfers_with_the_v1_protocol(store, engines):
    writer, reader = engines("seg-w"), engines("seg-r")
    doc = as_0_3_12(store, "seg-w")
    doc.pop("tcp_proto_version", None)
    store.put(KEYS.segment_key("seg-w"), json.dumps(doc).encode())
    assert reader.write("seg-w", 8, b"v1").ok
    # v1 has no write acknowledgement: the bytes land after the call returns
    wait_until(lambda: writer.local_read(8, 2) == b"v1", 10, "the v1 write to land")


def test_a_peer_that_publishes_no_proto_version_is_read_in_v1_framing(store, engines):
    """Mooncake reads a missing ``tcp_proto_version`` as 1, and 0.3.11 (which publishes none)
    speaks v1 only: the reader's requests to such a peer carry no v2 flag. The peer here is a
    v1-only data port on a raw socket (a v1 READ answered with its bytes alone, no status frame;
    a v2 request closed), which the reference's own server, speaking both, cannot stand for."""
    engines("seg-w")
    reader = engines("seg-r")
    seen: list[bool] = []  # the v2 flag of each request the peer received
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # shut down: the test is over
                return
            accepted.append(conn)
            with conn:
                try:
                    while len(raw := conn.recv(HEADER_SIZE, socket.MSG_WAITALL)) == HEADER_SIZE:
                        header = wire.decode_header(raw)
                        seen.append(header.v2)
                        if header.v2 or header.opcode != wire.READ:
                            break
                        conn.sendall((b"v1" * header.size)[:header.size])
                except OSError:
                    pass

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        doc = as_0_3_12(store, "seg-w")
        doc.pop("tcp_proto_version", None)
        doc["tcp_data_port"] = listener.getsockname()[1]
        store.put(KEYS.segment_key("seg-w"), json.dumps(doc).encode())
        out = reader.read("seg-w", 0, 4)
    finally:
        for sock in (listener, *accepted):  # wakes the blocked accept or recv
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        server.join(10)
        listener.close()
    assert not server.is_alive()
    assert out.ok and out.data == b"v1v1" and out.retries == 0, (out, seen)
    assert seen == [False], f"v2 flags of the requests the v1-only peer received: {seen}"


def test_the_rpc_entry_decides_where_the_reader_connects(store, engines):
    """Pointing the RPC entry elsewhere moves the reader (a real reader behaves alike,
    tests/targets/test_release_readers.py); without an entry there is nowhere to connect."""
    engines("seg-w")
    reader = engines("seg-r")
    as_0_3_12(store, "seg-w")
    rpc = json.loads(store.get(KEYS.rpc_meta_key("seg-w")))
    store.put(KEYS.rpc_meta_key("seg-w"), json.dumps({**rpc, "ip_or_host_name":
                                                      "no-such-host.invalid"}).encode())
    out = reader.write("seg-w", 0, b"x")
    assert not out.ok and "no-such-host.invalid" in out.error
    store.delete(KEYS.rpc_meta_key("seg-w"))
    out = reader.write("seg-w", 0, b"x")
    assert not out.ok and "has no RPC entry mooncake/rpc_meta/seg-w" in out.error
    store.put(KEYS.rpc_meta_key("seg-w"), json.dumps(rpc).encode())
    assert reader.write("seg-w", 0, b"x").ok


def test_rpc_entry_is_read_once_per_snapshot(store, engines):
    engines("seg-w")
    reader = engines("seg-r", ttl_ms=60_000)
    as_0_3_12(store, "seg-w")
    reads: list[str] = []
    original = store.get

    def counting_get(key: str):
        reads.append(key)
        return original(key)

    store.get = counting_get
    for _ in range(5):
        assert reader.write("seg-w", 0, b"again").ok
    assert reads.count(KEYS.rpc_meta_key("seg-w")) == 1


def test_a_descriptor_with_a_data_host_needs_no_rpc_entry(store, engines):
    writer, reader = engines("seg-w"), engines("seg-r")
    store.delete(KEYS.rpc_meta_key("seg-w"))
    assert decode(store.get(KEYS.segment_key("seg-w"))).tcp_data_host == "127.0.0.1"
    assert reader.write("seg-w", 0, b"direct").ok and writer.local_read(0, 6) == b"direct"
    assert encode(writer.descriptor) == store.get(KEYS.segment_key("seg-w"))
    assert RFC.identity.instance_id() == writer.descriptor.instance_id
