"""instance_id (MR-7) and the two profiles' policies."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from reference_engine import identity
from reference_engine.descriptor import tcp_descriptor
from reference_engine.profiles import LEGACY, RFC, get_profile

PRINT_ID = "from reference_engine.identity import process_instance_id as p; print(p())"


def test_instance_id_has_128_bits_hex_and_is_stable_in_a_process():
    iid = identity.process_instance_id()
    assert len(iid) >= 32 and int(iid, 16) >= 0
    assert identity.process_instance_id() == iid
    assert RFC.identity.instance_id() == iid


def test_every_process_start_gets_a_new_instance_id():
    ids = {
        subprocess.run([sys.executable, "-c", PRINT_ID], capture_output=True, text=True,
                       check=True, timeout=60).stdout.strip()
        for _ in range(3)
    }
    assert len(ids) == 3 and identity.process_instance_id() not in ids


def test_a_forked_child_is_a_new_incarnation():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, identity.process_instance_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child and child != identity.process_instance_id()


def test_legacy_publishes_no_instance_id():
    assert LEGACY.identity.instance_id() is None


def test_rfc_policy_honours_force_and_ttl_legacy_neither():
    rfc, legacy = RFC.engine.cache_policy(250), LEGACY.engine.cache_policy(250)
    assert rfc.honours_force and rfc.ttl_ns == 250e6
    assert not legacy.honours_force and legacy.ttl_ns == math.inf
    legacy.set_ttl_ms(1)
    assert legacy.ttl_ns == math.inf
    with pytest.raises(ValueError):
        rfc.set_ttl_ms(-1)


def test_replacement_policies():
    seen: list[str] = []
    a1 = tcp_descriptor("a", [(4096, 10)], "127.0.0.1", 1, "id-1")
    a2 = tcp_descriptor("a", [(4096, 10)], "127.0.0.1", 1, "id-2")
    old = tcp_descriptor("a", [(4096, 10)], "127.0.0.1", 1, None)
    assert RFC.engine.replacement.observe("a", a1, a2, seen.append)
    assert not RFC.engine.replacement.observe("a", a1, a1, seen.append)
    assert not RFC.engine.replacement.observe("a", a1, old, seen.append)
    assert seen == ["replacements", "legacy_peers"]
    assert not LEGACY.engine.replacement.observe("a", a1, a2, seen.append)
    assert len(seen) == 2


def test_unknown_profile_is_named():
    with pytest.raises(ValueError, match="'modern'"):
        get_profile("modern")
