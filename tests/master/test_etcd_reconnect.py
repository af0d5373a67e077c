"""An etcd client of the reference engine works again with its first call after etcd came
back: a gRPC channel whose connection failed went on failing for 12-13 s after etcd was healthy
(3 of 4 runs on this machine), longer than the recovery a failover test waits for."""

from __future__ import annotations

import uuid

import pytest

from reference_engine.etcd_connection import unreachable
from reference_engine.master.etcd_client import connect
from reference_engine.metadata.etcd_store import EtcdStore


def _outage(mc_etcd, calls) -> None:
    """Stop etcd, see every call in ``calls`` fail to reach it, start it again."""
    mc_etcd.stop()
    try:
        for call in calls:
            with pytest.raises(Exception) as info:  # noqa: PT011 (etcd3 and grpc errors)
                call()
            assert unreachable(info.value) or "etcd" in str(info.value), info.value
    finally:
        mc_etcd.start()


def test_master_client_answers_its_first_call_after_an_outage(mc_etcd) -> None:
    key = f"/reconnect/{uuid.uuid4().hex}"
    client = connect(mc_etcd.endpoints, timeout=2.0)
    client.put(key, "before")
    lease = client.lease(30)
    _outage(mc_etcd, [lambda: client.get(key), lambda: list(client.refresh_lease(lease.id)),
                      lambda: client.put(key, "during")])
    assert client.get(key)[0] == b"before"  # the first call after etcd is back
    assert client.reconnects == 3, "a failing call (refresh_lease: inside a generator) kept its client"
    client.put(key, "after")
    assert client.get(key)[0] == b"after"
    client.close()


def test_metadata_store_answers_its_first_call_after_an_outage(mc_etcd) -> None:
    key = f"/reconnect/{uuid.uuid4().hex}"
    host, _, port = mc_etcd.endpoints[0].rpartition(":")
    store = EtcdStore([(host, int(port))], timeout=2.0)
    store.put(key, b"before")
    _outage(mc_etcd, [lambda: store.get(key)] * 3)
    assert store.get(key) == b"before"
