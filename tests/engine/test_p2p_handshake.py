"""The reference engine's P2PHANDSHAKE mode: no store, peers exchange descriptors on their RPC
port in Mooncake's handshake framing (Metadata frames), over real loopback sockets."""

from __future__ import annotations

import base64
import json
import socket
import sys

import pytest

from pytest_mooncake.runtime.ports import free_port, release_port
from pytest_mooncake.runtime.processes import log_matches
from reference_engine.descriptor import decode, encode, tcp_descriptor
from reference_engine.engine.control_client import ControlClient
from reference_engine.metadata import (
    KeyLayout,
    MetadataError,
    MetadataUriError,
    open_store,
    parse_uri,
)
from reference_engine.metadata.handshake_store import HandshakeStore, split_server_name
from reference_engine.rdma.handshake_rpc import METADATA, read_frame, write_frame

READY = r'"event": "ready"'
LAYOUT = KeyLayout()


@pytest.mark.parametrize("name, expected", [
    ("127.0.0.1:15001", ("127.0.0.1", 15001)),
    ("127.0.0.1", ("127.0.0.1", 0)),
    ("[::1]:15002", ("::1", 15002)),
    ("host-a:0", ("host-a", 0)),
])
def test_segment_names_are_rpc_addresses(name, expected):
    assert split_server_name(name) == expected


@pytest.mark.parametrize("name, words", [(":15001", "no host"), ("h:70000", "bad port"),
                                         ("h:x", "bad port")])
def test_bad_segment_names_are_named(name, words):
    with pytest.raises(MetadataUriError, match=words):
        split_server_name(name)


def test_p2phandshake_is_a_uri_without_a_store():
    assert parse_uri("P2PHANDSHAKE").kind == "p2p"
    with pytest.raises(MetadataUriError, match="serves its own descriptor"):
        open_store("P2PHANDSHAKE")


@pytest.fixture
def stores():
    made: list[HandshakeStore] = []

    def make(name: str = "127.0.0.1") -> HandshakeStore:
        made.append(HandshakeStore(name, timeout=5.0))
        return made[-1]

    yield make
    for store in made:
        store.close()


def _publish(store: HandshakeStore, addr: int = 0x10000, instance: str = "i-1") -> bytes:
    value = encode(tcp_descriptor(store.segment_name, [(addr, 4096)], "127.0.0.1", 1, instance))
    store.put(LAYOUT.segment_key(store.segment_name), value)
    return value


def test_a_lookup_is_a_metadata_handshake_with_the_live_peer(stores):
    a, b = stores(), stores()
    assert a.segment_name == f"127.0.0.1:{a.port}" and a.port
    published = _publish(a)
    _publish(b, instance="i-b")
    got = b.get(LAYOUT.segment_key(a.segment_name))
    assert decode(got, a.segment_name) == decode(published, a.segment_name)
    assert a.served == 1
    # the RPC entry is the name parsed: no I/O
    entry = json.loads(b.get(LAYOUT.rpc_meta_key(a.segment_name)))
    assert entry == {"ip_or_host_name": "127.0.0.1", "rpc_port": a.port} and a.served == 1
    # a new descriptor of the same process is what the next handshake answers
    newer = _publish(a, addr=0x20000)
    assert b.get(LAYOUT.segment_key(a.segment_name)) == newer


def test_the_daemon_answers_mooncakes_framing_and_null_before_publishing(stores):
    a = stores()
    with socket.create_connection(("127.0.0.1", a.port), timeout=5) as sock:
        write_frame(sock, METADATA, {"name": "someone"})
        assert read_frame(sock) == (METADATA, None)
    _publish(a)
    with socket.create_connection(("127.0.0.1", a.port), timeout=5) as sock:
        write_frame(sock, METADATA, {})
        kind, reply = read_frame(sock)
    assert kind == METADATA and reply["name"] == a.segment_name and reply["instance_id"] == "i-1"


def test_a_dead_peer_or_a_nameless_one_is_a_failed_read(stores):
    a, b = stores(), stores()
    _publish(a)
    name = a.segment_name
    a.close()
    with pytest.raises(MetadataError, match="Connection refused"):
        b.get(LAYOUT.segment_key(name))
    with pytest.raises(MetadataError, match="no host:port"):
        b.get(LAYOUT.segment_key("seg-a"))
    with pytest.raises(MetadataError, match="has no store"):
        b.get("mooncake/other/key")


def test_the_daemon_binds_the_port_the_name_gives(stores):
    port = free_port()
    try:
        release_port(port)
        a = stores(f"127.0.0.1:{port}")
        assert a.segment_name == f"127.0.0.1:{port}"
        with pytest.raises(MetadataError, match="listen"):
            stores(f"127.0.0.1:{port}")
    finally:
        release_port(port)


def _engine(mc_processes, tag, name, *extra):
    argv = [sys.executable, "-m", "reference_engine", "engine", "--name", name,
            "--metadata", "P2PHANDSHAKE", "--protocol", "tcp", "--buffer-size", "65536", *extra]
    proc = mc_processes.start(tag, argv, ready=log_matches(READY))
    text = proc.log_text().rsplit("--- start #", 1)[-1]
    ready = next(json.loads(line) for line in text.splitlines() if '"event": "ready"' in line)
    return proc, ready, ControlClient(ready["control_port"])


def _write(client, peer, data):
    return client.call("write", peer=peer, offset=0, data_b64=base64.b64encode(data).decode())


def test_engines_transfer_and_recover_a_same_name_restart(mc_processes):
    """B killed and started again at its host:port: A's transfers fail within the retry
    budget while B is down, and reach the new process (new instance) once it is back."""
    port = free_port()
    try:
        release_port(port)
        _, ra, a = _engine(mc_processes, "a", "127.0.0.1")
        b_proc, rb, b = _engine(mc_processes, "b", f"127.0.0.1:{port}")
        peer = rb["segment"]
        assert peer == f"127.0.0.1:{port}" and ra["segment"].startswith("127.0.0.1:")
        assert _write(a, peer, b"first")["ok"]
        assert _write(b, ra["segment"], b"back")["ok"], "B reaches A by A's address too"
        b.close()
        b_proc.kill()
        down = _write(a, peer, b"lost")
        assert not down["ok"] and "Connection refused" in down["error"] and down["retries"] == 2
        b_proc2, rb2, b2 = _engine(mc_processes, "b2", f"127.0.0.1:{port}")
        assert rb2["segment"] == peer and rb2["instance_id"] != rb["instance_id"]
        again = _write(a, peer, b"second")
        assert again["ok"], again
        assert base64.b64decode(b2.call("local_read", offset=0, length=6)["data_b64"]) == b"second"
        stats = a.call("stats")
        assert stats["replacements"] >= 1 and stats["retries_exhausted"] == 1, stats
        b2.close()
        a.close()
    finally:
        release_port(port)
