"""The engine in-process: publication (MR-18), transfers, rejection, retry after failure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reference_engine.descriptor import decode, encode, tcp_descriptor
from reference_engine.engine.mapped_memory import MappingError, allocate
from reference_engine.metadata import KeyLayout
from reference_engine.profiles import LEGACY, RFC

KEYS = KeyLayout()
PRINT_INSTANCE_ID = ("from reference_engine.profiles import RFC; "
                     "print(RFC.identity.instance_id())")


@pytest.mark.parametrize("store", ["memory", "http"], indirect=True)
def test_publishes_a_fresh_descriptor_of_its_own_buffer_only(store, engines):
    """A predecessor killed under the name left its descriptor and its RPC entry; the new
    process publishes its own of both, also on an HTTP store with Mooncake's rule that an
    ``rpc_meta`` key is re-put only with an identical body (the entry is replaced)."""
    foreign = tcp_descriptor("a", [(4096, 1 << 30), (1 << 40, 4096)], "127.0.0.1", 1, "old-id")
    store.put(KEYS.segment_key("a"), encode(foreign))
    store.put(KEYS.rpc_meta_key("a"), b'{"ip_or_host_name":"127.0.0.1","rpc_port":1}\n')
    a = engines("a")
    published = decode(store.get(KEYS.segment_key("a")), "a")
    assert [(b.addr, b.length) for b in published.buffers] == [(a.region.addr, a.region.length)]
    assert published.instance_id == RFC.identity.instance_id() != "old-id"
    assert published.data_endpoint() == ("127.0.0.1", a.transport.data_port)
    assert published.tcp_proto_version == 2 and published.rdma_server_name == ""
    assert b'"rpc_port":%d' % a.transport.data_port in store.get(KEYS.rpc_meta_key("a"))


def test_two_segments_of_one_process_carry_the_same_instance_id(store, engines):
    """MR-7's per-process edge, which no target shows from outside (every target's engine
    process serves one segment): two engines of this process publish one identity, and a
    child process publishes another."""
    engines("a"), engines("b")
    a, b = (decode(store.get(KEYS.segment_key(n)), n).instance_id for n in ("a", "b"))
    assert a is not None and a == b, f"segments a and b of one process publish {a!r} and {b!r}"
    child = subprocess.run([sys.executable, "-c", PRINT_INSTANCE_ID], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    assert len(child) == 32 and child != a, f"another process publishes {child!r}, this one {a!r}"

def test_legacy_publishes_no_instance_id(store, engines):
    engines("a", LEGACY)
    assert decode(store.get(KEYS.segment_key("a"))).instance_id is None


def test_write_and_read_a_peer(engines):
    a, b = engines("a"), engines("b")
    assert b.write("a", 100, b"hello").ok
    assert a.local_read(100, 5) == b"hello"
    got = b.read("a", 100, 5)
    assert got.ok and got.data == b"hello" and got.retries == 0


def test_access_outside_the_peers_buffers_is_rejected_and_bounded(engines):
    a, b = engines("a"), engines("b")
    before = a.local_read(0, 16)
    out = b.write_at("a", a.region.addr + a.region.length - 2, b"0123")
    assert not out.ok and "PeerRejectedError" in out.error
    assert out.retries == RFC.engine.retry_budget
    assert b.stats()["retries_exhausted"] == 1
    assert a.local_read(0, 16) == before


def test_legacy_does_not_retry(engines):
    engines("a")
    b = engines("b", LEGACY)
    out = b.write_at("a", 8, b"x")
    assert not out.ok and out.retries == 0 and b.stats()["refresh_forced"] == 0


def test_transport_failure_forces_a_refresh_and_retries(store, engines):
    a, b = engines("a"), engines("b", ttl_ms=60_000)
    assert b.write("a", 0, b"one").ok
    a.transport.stop()
    a2 = engines("a")
    out = b.write("a", 0, b"two")
    assert out.ok and out.retries == 1, out
    assert a2.local_read(0, 3) == b"two"
    stats = b.stats()
    assert stats["refresh_forced"] == 1 and stats["endpoints_retired"] >= 1


def test_a_failing_transfer_retries_its_budget_each_retry_counted_and_forced(engines):
    """MR-12's budget from inside the engine: a transfer to a peer whose data port is gone
    makes its first attempt and exactly ``retry_budget`` retries, each one counted and each
    after a forced refresh (the first retry too), none on the cached descriptor unforced."""
    a, b = engines("a"), engines("b", ttl_ms=60_000)
    assert b.write("a", 0, b"one").ok
    a.transport.stop()
    before = b.stats()
    out = b.write("a", 0, b"two")
    after = b.stats()
    budget = RFC.engine.retry_budget
    assert budget > 0 and not out.ok and out.retries == budget, out
    moved = {k: after.get(k, 0) - before.get(k, 0)
             for k in ("transfer_retries", "refresh_forced", "retries_exhausted")}
    assert moved == {"transfer_retries": budget, "refresh_forced": budget,
                     "retries_exhausted": 1}, moved


def test_stop_removes_only_keys_that_are_still_ours(store, engines):
    a = engines("a")
    a.stop()
    assert store.get(KEYS.segment_key("a")) is None
    a2 = engines("a")
    a.stop()
    assert store.get(KEYS.segment_key("a")) is not None, "a successor's key survived"
    a2.stop()


def test_fixed_address_mapping_never_clobbers():
    region = allocate(1 << 16)
    with pytest.raises(MappingError, match="already mapped"):
        allocate(1 << 16, fixed_address=region.addr)
    with pytest.raises(ValueError, match="page aligned"):
        allocate(4096, fixed_address=region.addr + 1)


def test_default_buffers_sit_where_a_successor_can_map_them_again():
    from reference_engine.engine.mapped_memory import QUIET_HIGH, QUIET_LOW, allocate_restartable

    region = allocate_restartable(1 << 16)
    assert QUIET_LOW <= region.addr < QUIET_HIGH
