"""The reference engine process (``python -m reference_engine engine``) and a real Mooncake
0.3.13 engine, sharing one metadata store, move bytes both ways by segment name."""

from __future__ import annotations

import base64
import json
import sys

import pytest

from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.runtime.processes import log_matches
from reference_engine.engine.control_client import ControlClient

pytestmark = pytest.mark.interop

READY = r'"event": "ready"'


def _ready_line(proc) -> dict:
    text = proc.log_text().rsplit("--- start #", 1)[-1]
    return next(json.loads(line) for line in text.splitlines() if '"event": "ready"' in line)


@pytest.fixture
def ref_engine(mc_processes, metadata):
    name = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "reference_engine", "engine", "--name", name,
            "--metadata", metadata.uri, "--protocol", "tcp", "--buffer-size", str(1 << 20)]
    proc = mc_processes.start("ref-engine", argv, ready=log_matches(READY), ready_timeout=30)
    ready = _ready_line(proc)
    control = ControlClient(ready["control_port"])
    yield name, ready, control
    control.close()


@pytest.mark.mc_req("MR-8")
def test_real_engine_and_reference_engine_process_transfer_both_ways(real_engine, ref_engine):
    name, ready, control = ref_engine
    base = ready["buffers"][0][0]
    assert ready["instance_id"], "the rfc profile publishes an instance_id the real engine must read"

    assert real_engine.write(name, base + 16, b"real -> reference process") == 0
    got = control.call("local_read", offset=16, length=25)
    assert base64.b64decode(got["data_b64"]) == b"real -> reference process"

    control.call("local_write", offset=4096, data_b64=base64.b64encode(b"planted").decode())
    assert real_engine.read(name, base + 4096, 7) == (0, b"planted")

    msg = b"reference process -> real"
    out = control.call("write_at", peer=real_engine.name, addr=real_engine.buffer + 32,
                       data_b64=base64.b64encode(msg).decode())
    assert out["ok"], out
    assert real_engine.peek(32, len(msg)) == msg

    real_engine.poke(8192, b"from real memory")
    out = control.call("read_at", peer=real_engine.name, addr=real_engine.buffer + 8192, length=16)
    assert out["ok"], out
    assert base64.b64decode(out["data_b64"]) == b"from real memory"
