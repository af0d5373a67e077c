"""Our encoder against each release's own client, byte for byte: a real mooncake.store client
puts, gets, checks and removes a key through a recording relay in front of its master; every
request our layout declares must re-encode to exactly the bytes the release sent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from wire_release_list import WIRE_RELEASES

from pytest_mooncake.master_rpc.capture import RecordingRelay, compare
from pytest_mooncake.master_rpc.probe import probe

SCRIPT = Path(__file__).with_name("real_store_client.py")
MUST_SEE = {"ServiceReady", "MountSegment", "Ping", "PutStart", "PutEnd", "GetReplicaList",
            "ExistKey", "Remove", "UnmountSegment", "ReMountSegment", "GetStorageConfig",
            "FetchTasks"}


@pytest.mark.parametrize("release", WIRE_RELEASES)
def test_the_release_client_sends_what_our_encoder_writes(real_master, release_env, release):
    master = real_master(release)
    layout = probe(master.address, write=False).layout
    env = release_env(release)
    with RecordingRelay(master.address) as relay:
        run = subprocess.run([str(env.python), str(SCRIPT), relay.address], env=env.env(),
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"the release's client failed: {run.stdout}{run.stderr[-2000:]}"
    assert "put 0" in run.stdout and "get 64 same" in run.stdout, run.stdout
    compared = [c for c in (compare(r, layout) for r in relay.frames) if c is not None]
    seen = {c.method for c in compared}
    assert MUST_SEE <= seen, f"the client made none of {sorted(MUST_SEE - seen)}"
    differ = [f"{c.method}: {c.detail}" for c in compared if not c.same]
    assert not differ, f"{release} (layout {layout.name}): " + "; ".join(differ)
