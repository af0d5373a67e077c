"""The leader's own idea of its lease never outlives etcd's: on a real etcd reached through a
slow link (a Toxiproxy latency toxic), a session counts itself valid only until the grant
request was *sent* plus the TTL (minus the margin), not until the slow acquisition finished
plus the TTL. Otherwise a leader elected over a slow network would serve after etcd had
already expired its lease and let a standby in."""

from __future__ import annotations

import uuid

import pytest

from pytest_mooncake.waits import wait_until
from reference_engine.master.election import LeaderElection
from reference_engine.master.etcd_client import connect
from reference_engine.master.oplog import master_view_key


@pytest.mark.mc_req("MP-6")
def test_slow_acquisition_does_not_stretch_the_lease_past_etcds(mc_etcd, mc_faults):
    proxy, via = mc_faults.proxy("slow-etcd", mc_etcd.endpoints[0])
    slow = connect([via], timeout=10.0)
    direct = mc_etcd.client()
    cluster = f"elect-{uuid.uuid4().hex[:8]}"
    key = master_view_key(cluster)
    try:
        slow.get(key)                                   # channel up before the link slows down
        proxy.add_toxic(type="latency", attributes={"latency": 700})   # every answer late
        # Acquisition is three round trips (grant, transaction, read back): ~2.1 s at 700 ms each,
        # so the TTL must outlast it or etcd may expire the key before we can look.
        session = LeaderElection(slow, cluster, "127.0.0.1:1", ttl=4, margin=0.5).try_acquire()
        assert session is not None, "the election over a slow link did not acquire"
        assert direct.get(key)[0] == b"127.0.0.1:1", "the leader key is not in etcd after acquiring"
        # No keepalive from here: etcd expires the lease TTL seconds after it granted it.
        wait_until(lambda: direct.get(key)[1] is None, 20, "etcd to expire the leader's lease")
        assert not session.valid(), \
            "etcd has expired the lease but its holder still counts itself the leader"
    finally:
        slow.close()
        direct.close()
