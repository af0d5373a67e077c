"""targets/p2p_deployment.py: names, the store-less metadata handle and its reasons, engines
reached by logical names (real sockets: a reference handshake daemon answers)."""

from __future__ import annotations

import json
import socket

import pytest

from pytest_mooncake.runtime.ports import claims_dir
from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.p2p_deployment import (
    P2pDirectory,
    P2pEngine,
    P2pMetadata,
    ask_peer,
    start_deployed,
)
from reference_engine.descriptor import encode, tcp_descriptor
from reference_engine.metadata import KeyLayout
from reference_engine.metadata.handshake_store import HandshakeStore


def test_a_logical_name_keeps_its_address_and_a_span_claims_the_next_ports():
    directory = P2pDirectory(span=3)
    try:
        a = directory.address("seg-a")
        assert a == directory.address("seg-a") and a.startswith("127.0.0.1:")
        assert directory.address("seg-b") != a
        assert directory.known("seg-a") == a and directory.known("seg-z") == "seg-z"
        assert directory.address("127.0.0.1:15001") == "127.0.0.1:15001"
        port = int(a.rpartition(":")[2])
        assert all((claims_dir() / str(p)).exists() for p in (port, port + 1, port + 2))
    finally:
        directory.close()
    assert not (claims_dir() / str(port)).exists(), "close releases the claims"


@pytest.fixture
def daemon():
    store = HandshakeStore("127.0.0.1")
    value = encode(tcp_descriptor(store.segment_name, [(0x10000, 4096)], "127.0.0.1", 1, "i-1"))
    store.put(KeyLayout().segment_key(store.segment_name), value)
    yield store
    store.close()


def test_get_is_a_handshake_with_the_live_peer_and_none_when_nothing_listens(daemon):
    meta = P2pMetadata("reference+metadata=p2p", P2pDirectory())
    got = json.loads(meta.get(meta.segment_key(daemon.segment_name)))
    assert got["instance_id"] == "i-1" and daemon.served == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"
    assert ask_peer(nobody) is None


@pytest.mark.parametrize("call, words", [
    (lambda m: m.put("mooncake/ram/seg-a", b"{}"), "planting a value under 'mooncake/ram/seg-a'"),
    (lambda m: m.delete("mooncake/ram/seg-a"), "deleting"),
    (lambda m: m.keys("mooncake/"), "listing keys"),
    (lambda m: m.address, "a fault proxy"),
    (lambda m: m.through("127.0.0.1:1"), "routing metadata traffic"),
    (lambda m: m.get("mooncake/rpc_meta/x"), "reading key"),
])
def test_what_needs_a_store_is_not_applicable_with_the_deployments_reason(call, words):
    meta = P2pMetadata("mooncake==0.3.14+metadata=p2p", P2pDirectory(),
                       accepted="TransferEngine.initialize(..., 'P2PHANDSHAKE') returned 0")
    with pytest.raises(TargetLacks) as caught:
        call(meta)
    assert caught.value.capability is Capability.METADATA_STORE
    assert caught.value.reason.startswith(
        "mooncake==0.3.14+metadata=p2p is deployed on P2PHANDSHAKE metadata (--mc-metadata=p2p) "
        "(TransferEngine.initialize(..., 'P2PHANDSHAKE') returned 0): there is no metadata store")
    assert words in caught.value.reason


class _Recorder:
    """A stand-in engine handle that records the peer names it is called with."""

    def __init__(self, segment):
        self.segment = segment
        self.calls = []

    def write(self, peer, offset, data):
        self.calls.append(("write", peer))
        return "ok"

    def lookup(self, peer, force=False):
        self.calls.append(("lookup", peer))
        return "seen"


def test_engines_start_at_their_address_and_peers_are_translated():
    meta = P2pMetadata("reference+metadata=p2p", P2pDirectory())
    try:
        a = start_deployed(_Recorder, "seg-a", meta)
        b = start_deployed(_Recorder, "seg-b", meta)
        assert isinstance(a, P2pEngine) and a.segment == "seg-a"
        assert a._engine.segment == a.segment_name == meta.directory.address("seg-a")
        assert a.write("seg-b", 0, b"x") == "ok" and a.lookup("seg-b") == "seen"
        assert a._engine.calls == [("write", b.segment_name), ("lookup", b.segment_name)]
        assert meta.segment_key("seg-b") == f"mooncake/ram/{b.segment_name}"
    finally:
        meta.close()
    plain = start_deployed(_Recorder, "seg-a", type("Etcd", (), {"kind": "etcd"})())
    assert isinstance(plain, _Recorder) and plain.segment == "seg-a"
