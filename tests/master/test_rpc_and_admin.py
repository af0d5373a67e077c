"""Bad input at the RPC and admin ports: clear errors, no crash; the drain lifecycle (MP-10)
through a running leader; a force-killed client's segment goes away cleanly."""

from __future__ import annotations

import json
import socket
import struct
import urllib.error
import urllib.request

import pytest

from pytest_mooncake.waits import TRANSIENT, wait_until
from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.protocol import MAX_FRAME, recv_frame, send_frame
from reference_engine.master.rpc_server import RpcServer


@pytest.fixture
def echo_server():
    def hello(msg, conn):
        if msg.get("version") == "bad":
            raise MasterError(ErrorCode.INVALID_VERSION, "bad version")
        return {"version": "1.0.0"}

    def handler(op, args, conn):
        if op == "boom":
            raise KeyError("field")
        return {"op": op, "args": args}

    server = RpcServer("127.0.0.1", 0, hello, handler)
    server.start()
    yield server
    server.close()


def connect(server):
    host, _, port = server.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def test_handshake_then_requests_unknown_fields_ignored(echo_server):
    with connect(echo_server) as s:
        send_frame(s, {"op": "hello", "version": "1.2", "future_field": 1})
        assert recv_frame(s)["ok"]
        send_frame(s, {"id": 7, "op": "x", "args": {"a": 1}, "extra": True})
        assert recv_frame(s) == {"id": 7, "ok": True, "result": {"op": "x", "args": {"a": 1}}}
        send_frame(s, {"id": 8, "op": "boom"})
        reply = recv_frame(s)
        assert reply["error"] == "INVALID_PARAMS" and "boom" in reply["message"]
        send_frame(s, {"id": 9, "op": 5})
        assert recv_frame(s)["error"] == "INVALID_RPC_ARGUMENTS"


def test_rejected_handshake_and_missing_handshake(echo_server):
    with connect(echo_server) as s:
        send_frame(s, {"op": "hello", "version": "bad"})
        assert recv_frame(s)["error"] == "INVALID_VERSION"
    with connect(echo_server) as s:
        send_frame(s, {"op": "put_start"})
        assert "hello" in recv_frame(s)["message"]


DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(("payload", "words"), [
    (struct.pack(">I", MAX_FRAME + 1), "exceeds"),
    (struct.pack(">I", 0xFFFFFFFF), "exceeds"),
    (struct.pack(">I", 5) + b"nope!", "not JSON"),
    (struct.pack(">I", 2) + b"[]", "not a JSON object"),
    (struct.pack(">I", len(DEEP)) + DEEP, "nested deeper"),
    (struct.pack(">I", 4) + b"\xff\xfe{}", "not JSON"),
], ids=["oversized", "0xFFFFFFFF", "not-json", "array", "deep", "not-utf8"])
def test_malformed_frames_get_an_error_frame_then_close_and_the_server_lives_on(
        echo_server, payload, words):
    with connect(echo_server) as s:
        s.sendall(payload)
        reply = recv_frame(s)
        assert reply["ok"] is False and reply["id"] is None, reply
        assert reply["error"] == "INVALID_RPC_ARGUMENTS" and words in reply["message"], reply
        assert s.recv(100) == b""
    with connect(echo_server) as s:
        send_frame(s, {"op": "hello", "version": "1"})
        assert recv_frame(s)["ok"]


def test_admin_rejects_bad_requests_with_4xx(cluster_factory):
    cluster = cluster_factory("rfc", masters=1)
    admin = cluster.masters[0].admin
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(admin + "/nope", timeout=5)
    assert e.value.code == 404
    req = urllib.request.Request(admin + "/ha/promote", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400 and "JSON" in json.loads(e.value.read())["error"]
    req = urllib.request.Request(admin + "/ha/snapshot", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 409
    assert json.loads(urllib.request.urlopen(admin + "/health", timeout=5).read())["service_ready"]


@pytest.mark.mc_req("MP-10")
def test_drain_lifecycle_and_force_killed_client_segment(cluster_factory):
    cluster = cluster_factory("rfc", masters=1, clients=3, client_ttl=1.5)
    for i in range(12):
        assert cluster.client(0).put(f"k{i}")["ok"]
    admin = cluster.library_client(client_id="operator").start(wait=10)
    source = "client-0@127.0.0.1"
    on_source = [k for k in (f"k{i}" for i in range(12))
                 if admin.get(k)["replicas"][0]["descriptors"][0][0] == source]
    assert on_source
    admin.call("drain_segment", {"endpoint": source})
    for k in on_source:
        admin.get(k)
    for i in range(6):
        assert cluster.client(1).put(f"new{i}")["ok"]
        assert admin.get(f"new{i}")["replicas"][0]["descriptors"][0][0] != source
    wait_until(lambda: admin.call("segment_status", {"endpoint": source})["status"] == "DRAINED",
             10, "segment drained", ignore=TRANSIENT)
    assert all(admin.exists(f"k{i}") for i in range(12))
    cluster.client(2).kill()
    victim = "client-2@127.0.0.1"
    wait_until(lambda: _gone(admin, victim), 10, "killed client's segment unmounted", ignore=TRANSIENT)
    assert cluster.metrics(0)["master_active_clients"] == 3  # client-0, client-1, operator


def _gone(client, endpoint):
    try:
        client.call("segment_status", {"endpoint": endpoint})
    except MasterError as exc:
        return exc.code is ErrorCode.SEGMENT_NOT_FOUND
    return False
