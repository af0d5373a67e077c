"""The mooncake target against the real wheel: real TransferEngine processes on a real etcd."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_mooncake.runtime.processes import live_processes
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.targets.base import Capability, EngineHandle
from pytest_mooncake.targets.mooncake.driver.engine_proxies import EngineRestartFailed


@pytest.fixture
def etcd_meta(mooncake_target):
    store = mooncake_target.metadata_store("etcd")
    yield store
    store.close()


@pytest.fixture
def engines(mooncake_target, etcd_meta, request):
    started = []

    def start(segment, metadata=None, **options):
        engine = mooncake_target.start_engine(f"{segment}-{os.getpid()}-{request.node.name}",
                                              metadata or etcd_meta, **options)
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.kill()


def test_engine_publishes_descriptor_under_mooncake_ram(engines, etcd_meta):
    engine = engines("pub")
    assert isinstance(engine, EngineHandle)
    key = f"mooncake/ram/{engine.segment}"
    assert key in etcd_meta.keys("mooncake/ram/")
    desc = json.loads(etcd_meta.get(key))
    assert desc["name"] == engine.segment
    assert desc["protocol"] == "tcp"
    assert desc["tcp_data_host"] == "127.0.0.1"
    addr, length = engine.buffers()[0]
    assert [(b["addr"], b["length"]) for b in desc["buffers"]] == [(addr, length)]
    assert engine.descriptor() == desc


def test_two_real_engines_transfer_both_ways(engines):
    a, b = engines("a"), engines("b")
    assert a.write(b.segment, 100, b"from-a").ok
    assert b.local_read(100, 6) == b"from-a"
    a.local_write(0, b"held-by-a")
    got = b.read(a.segment, 0, 9)
    assert got.ok and got.data == b"held-by-a"
    assert b.write(a.segment, 4096, b"from-b").ok
    assert a.read(a.segment, 4096, 6).data == b"from-b"
    back = a.read(b.segment, 100, 6)
    assert back.ok and back.data == b"from-a"


def test_lookup_reports_peer_first_buffer_and_unknown_peer_fails(engines):
    a, b = engines("la"), engines("lb")
    found = a.lookup(b.segment)
    assert found.ok and found.descriptor["buffers"][0]["addr"] == b.buffers()[0][0]
    missing = a.lookup("no-such-segment")
    assert not missing.ok and "no-such-segment" in missing.error
    failed = a.write("no-such-segment", 0, b"x")
    assert not failed.ok and "no-such-segment" in failed.error


def test_write_outside_registered_memory_is_rejected_by_the_real_engine(engines):
    a, b = engines("fa"), engines("fb")
    addr, length = b.buffers()[0]
    result = a.write_at(b.segment, addr + length + 4096, b"foreign")
    assert not result.ok and "returned" in result.error


def test_missing_means_raise_target_lacks_with_named_reason(engines, mooncake_target):
    a = engines("lack")
    with pytest.raises(TargetLacks) as ttl:
        a.set_ttl_ms(100)
    assert ttl.value.capability is Capability.CACHE_TTL
    assert "start it with ttl_ms=" in ttl.value.reason
    with pytest.raises(TargetLacks) as counters:
        a.stats()
    assert counters.value.capability is Capability.ENGINE_COUNTERS
    with pytest.raises(TargetLacks) as forced:
        a.lookup(a.segment, force=True)
    assert forced.value.capability is Capability.FORCED_REFRESH
    assert "0.3" in forced.value.reason
    assert a.driver_stats()["lookups_ok"] == 0
    assert a.cache_ttl_ms is None, "0.3.13 serves a cached descriptor for ever by default"


def test_ttl_becomes_the_builds_whole_second_refresh_interval(engines, mooncake_target):
    """ttl_ms rounds up to MC_TE_METADATA_REFRESH_INTERVAL_SECONDS in the driver's environment
    (0.3.13 ignores a fraction); ttl_ms=0 turns the cache off (MC_DISABLE_METACACHE)."""
    a = engines("ttl-a")
    b = engines("ttl-b", ttl_ms=200)
    off = engines("ttl-off", ttl_ms=0)
    assert (b.cache_ttl_ms, off.cache_ttl_ms) == (1000.0, 0.0)
    environ = Path(f"/proc/{b.pid}/environ").read_bytes().split(b"\0")
    assert b"MC_TE_METADATA_REFRESH_INTERVAL_SECONDS=1" in environ
    assert b"MC_DISABLE_METACACHE=1" in Path(f"/proc/{off.pid}/environ").read_bytes().split(b"\0")
    assert b.lookup(a.segment).descriptor["buffers"][0]["addr"] == a.buffers()[0][0]
    assert b.lookup(a.segment).partial


def test_kill_and_restart_leave_no_process_behind(engines):
    a, b = engines("ka"), engines("kb")
    first_pid, first_addr = a.pid, a.buffers()[0][0]
    a.restart()
    assert a.pid != first_pid and a.alive()
    assert a.buffers()[0][0] != first_addr
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)
    kept = a.buffers()[0][0]
    a.restart(keep_addresses=True)
    assert a.buffers()[0][0] == kept
    assert b.write_at(a.segment, kept, b"after-restart").ok
    assert a.local_read(0, 13) == b"after-restart"
    pids = [a.pid, b.pid]
    a.kill()
    b.stop()
    assert not a.alive() and not b.alive()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not [p for p in live_processes() if p.pid in pids]


def test_restart_after_sigkill_inherits_the_dead_buffers(engines):
    """Observed on 0.3.13: an engine that starts under a name whose descriptor a SIGKILLed
    predecessor left behind adopts that descriptor and appends its own buffer, so the first
    published buffer is the dead process's; a write there is refused (the server survives)."""
    a, b = engines("ra"), engines("rb")
    dead = a.buffers()[0][0]
    a.restart()
    live = a.buffers()[0][0]
    assert [buf["addr"] for buf in a.descriptor()["buffers"]] == [dead, live]
    stale = b.write(a.segment, 0, b"to-first-buffer")
    assert not stale.ok
    assert a.alive()
    assert b.write_at(a.segment, live, b"to-live").ok
    assert a.local_read(0, 7) == b"to-live"


def test_graceful_stop_unpublishes_but_sigkill_leaves_the_key(engines, etcd_meta):
    """Observed on 0.3.13: the engine's destructor removes its keys; SIGKILL leaves them. The
    handle's stop() then removes leftovers so a later engine of that name starts clean."""
    stopped, killed = engines("gs"), engines("gk")
    stopped.stop()
    assert stopped.stop_outcome == "exited", stopped.logs()[-2000:]
    assert "driver: engine destroyed" in stopped.logs()
    assert stopped.left_behind == []
    killed.kill()
    key = f"mooncake/ram/{killed.segment}"
    assert etcd_meta.get(key) is not None
    killed.stop()
    assert killed.left_behind == [key, f"mooncake/rpc_meta/{killed.segment}"]
    assert etcd_meta.get(key) is None


def test_http_metadata_server_of_the_wheel(mooncake_target, engines):
    http = mooncake_target.metadata_store("http")
    try:
        assert http.uri.startswith("http://127.0.0.1:") and http.uri.endswith("/metadata")
        a, b = engines("ha", metadata=http), engines("hb", metadata=http)
        assert json.loads(http.get(f"mooncake/ram/{a.segment}"))["name"] == a.segment
        assert a.write(b.segment, 8, b"over-http").ok
        assert b.local_read(8, 9) == b"over-http"
    finally:
        http.close()
    assert not http.process.alive()


def test_engine_metadata_through_a_fault_proxy(mooncake_target, engines, etcd_meta, mc_faults):
    """METADATA_FAULTS: the real engine's etcd client works through the plugin's proxy, and a
    cut proxy makes a fresh lookup of an unknown peer fail (observed, not assumed)."""
    proxy, address = mc_faults.proxy("mooncake-etcd", etcd_meta.address)
    through = etcd_meta.through(address)
    assert through.uri == f"etcd://{address}" and through.address == etcd_meta.address
    a = engines("px-a", metadata=through)
    b = engines("px-b")
    assert json.loads(etcd_meta.get(f"mooncake/ram/{a.segment}"))["name"] == a.segment
    assert a.write(b.segment, 0, b"proxied").ok
    proxy.disable()
    try:
        c = engines("px-c")
        late = a.lookup(c.segment)
        assert not late.ok
        assert a.write(b.segment, 0, b"cached-peer").ok
    finally:
        proxy.enable()
    assert a.lookup(c.segment).ok


def test_restart_with_the_wheels_http_metadata_server_is_refused(mooncake_target, engines):
    """Observed on 0.3.13: after SIGKILL, a new engine under the same name cannot start against
    the wheel's HTTP metadata server (its rpc_meta PUT is answered 400 "Duplicate rpc_meta key
    not allowed" and initialize returns -1). The handle reports that as a failed verdict."""
    http = mooncake_target.metadata_store("http")
    try:
        a = engines("hr", metadata=http)
        with pytest.raises(EngineRestartFailed, match="Duplicate rpc_meta key not allowed"):
            a.restart()
        assert not a.alive()
    finally:
        http.close()
