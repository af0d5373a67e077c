"""MR-2 judged on the wire: within the TTL a lookup does no metadata-store I/O, so the bytes
an engine sends toward the store do not move however often it looks a cached peer up.

Lookups alone cannot tell a cache that quietly re-reads the value on every hit (and keeps its
snapshot while the read agrees or fails) from one that does no I/O: both serve the cached
descriptor. The proxy in front of the store can: B reaches the store only through it, and the
proxy's byte counters (Toxiproxy's ``toxiproxy_proxy_received_bytes_total``) say whether B
sent anything. HTTP metadata only: each request is bytes on a connection, and an idle HTTP
client sends nothing (a gRPC channel to etcd may send keepalive pings of its own accord).
"""

from __future__ import annotations

import pytest

from pytest_mooncake.planting import described, plant, published, shows, with_probe_buffer
from pytest_mooncake.targets import TargetLacks

LONG_TTL_MS = 600_000
LOOKUPS = 20

pytestmark = pytest.mark.mc_requires("engine", "cache_control")


@pytest.mark.mc_req("MR-2")
@pytest.mark.parametrize("mc_metadata", ["http"], indirect=True)
def test_lookups_within_the_ttl_send_nothing_to_the_store(mc_engine, mc_metadata,
                                                          proxied_metadata, mc_faults):
    proxy, via_proxy = proxied_metadata
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=via_proxy, prefer_ttl_ms=LONG_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), (
        f"B could not resolve A through the proxy: {described(b.lookup('seg-a'))}")
    plant(mc_metadata, "seg-a", with_probe_buffer(first, "probe-v2", first=True))
    before = mc_faults.received_bytes(proxy.name)
    if isinstance(before, str):
        raise TargetLacks("metadata_faults", before)
    served = [b.lookup("seg-a") for _ in range(LOOKUPS)]
    after = mc_faults.received_bytes(proxy.name)
    stale = [described(s) for s in served if not shows(s, first)]
    assert not stale, (
        f"within its TTL ({LONG_TTL_MS} ms asked) B served {stale[0]} instead of its cached "
        f"snapshot (MR-2: within the TTL a lookup does no metadata-store I/O, so it cannot "
        f"see the new value)")
    sent = after["upstream"] - before["upstream"]
    assert sent == 0, (
        f"B's {LOOKUPS} lookups of a peer it had cached moments before, within its TTL "
        f"({LONG_TTL_MS} ms asked), sent {sent:g} bytes toward the metadata store (and read "
        f"{after['downstream'] - before['downstream']:g} back) although each served the cached "
        f"snapshot; MR-2 requires that within the TTL a lookup does no metadata-store I/O")
