"""The engine as a process: ready line, control channel, clean stop, bad starts."""

from __future__ import annotations

import base64
import json
import socket
import sys

import pytest

from pytest_mooncake.runtime.processes import log_matches
from reference_engine.descriptor import decode
from reference_engine.engine.control_client import ControlClient, ControlError
from reference_engine.metadata import KeyLayout, open_store

READY = r'"event": "ready"'


def ready_line(proc) -> dict:
    text = proc.log_text().rsplit("--- start #", 1)[-1]
    return next(json.loads(line) for line in text.splitlines() if '"event": "ready"' in line)


def engine_argv(name, uri, *extra):
    return [sys.executable, "-m", "reference_engine", "engine", "--name", name, "--metadata", uri,
            "--protocol", "tcp", "--buffer-size", "65536", *extra]


def test_engine_process_publishes_serves_and_stops_cleanly(mc_processes, mc_etcd):
    store = open_store(mc_etcd.uri)
    a = mc_processes.start("a", engine_argv("proc-a", mc_etcd.uri), ready=log_matches(READY))
    b = mc_processes.start("b", engine_argv("proc-b", mc_etcd.uri, "--profile", "legacy"),
                           ready=log_matches(READY))
    ra, rb = ready_line(a), ready_line(b)
    assert ra["instance_id"] and rb["instance_id"] is None
    published = decode(store.get(KeyLayout().segment_key("proc-a")), "proc-a")
    assert published.instance_id == ra["instance_id"]
    assert [[x.addr, x.length] for x in published.buffers] == ra["buffers"]
    ca, cb = ControlClient(ra["control_port"]), ControlClient(rb["control_port"])
    out = cb.call("write", peer="proc-a", offset=8, data_b64=base64.b64encode(b"xyz").decode())
    assert out["ok"], out
    assert base64.b64decode(ca.call("local_read", offset=8, length=3)["data_b64"]) == b"xyz"
    with pytest.raises(ControlError, match="unknown op 'dance'"):
        ca.call("dance")
    with pytest.raises(ControlError, match="'offset' must be an integer"):
        ca.call("read", peer="proc-b", offset="1", length=1)
    raw = socket.create_connection(("127.0.0.1", ra["control_port"]), timeout=10)
    raw.sendall(b"{not json\n[1,2]\n")
    replies = raw.makefile("rb")
    assert b"request is not JSON" in replies.readline()
    assert b"a request is a JSON object" in replies.readline()
    raw.close()
    assert ca.call("info")["segment"] == "proc-a", "bad requests did not hurt the engine"
    ca.call("stop")
    assert a.wait_exit(10) == 0
    assert store.get(KeyLayout().segment_key("proc-a")) is None, "clean stop removes its key"
    assert b.terminate() == 0
    ca.close()
    cb.close()


def test_engine_with_an_unusable_metadata_uri_exits_with_a_reason(mc_processes):
    proc = mc_processes.start("bad", engine_argv("x", "http://127.0.0.1:1"))
    assert proc.wait_exit(30) == 1
    assert "needs the path" in proc.log_text()
