"""etcd stopped and restarted under write load: no acknowledged write is lost, the leader steps
down instead of serving without its lease, and two leaders never both acknowledge writes
(checked on the history of acknowledged operations)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from pytest_mooncake.waits import TRANSIENT, holds_for, wait_until
from reference_engine.master.error_codes import MasterError
from reference_engine.master.model import SegmentInfo


@dataclass
class Ack:
    key: str
    start: float
    end: float
    sequence_id: int
    view_version: int


def writer(client, name: str, stop: threading.Event, acks: list, failures: list) -> None:
    i = 0
    while not stop.is_set():
        key = f"{name}-{i}"
        i += 1
        start = time.monotonic()
        try:
            result = client.put(key, 32)
        except MasterError as exc:
            failures.append((key, exc.code.value))
            time.sleep(0.05)
            continue
        acks.append(Ack(key, start, time.monotonic(), result["sequence_id"], result["view_version"]))


@pytest.mark.mc_req("MP-6")
def test_etcd_restart_loses_no_acknowledged_write_and_never_splits_brain(cluster_factory, mc_etcd):
    cluster = cluster_factory("rfc", masters=2, write_timeout=2.0)
    clients = [cluster.library_client(client_id=f"w{i}", reattach_timeout=1.0,
                                      segment=SegmentInfo(f"w{i}", f"w{i}@127.0.0.1", (i + 1) << 40,
                                                          1 << 30)).start(wait=10)
               for i in range(2)]
    acks: list[Ack] = []
    failures: list = []
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(c, c.client_id, stop, acks, failures))
               for c in clients]
    for t in threads:
        t.start()
    observed_serving: list[list[int]] = []
    try:
        wait_until(lambda: len(acks) >= 20, 20, "writes before the outage", ignore=TRANSIENT)
        mc_etcd.stop()
        down_at = time.monotonic()
        try:
            def none_serving() -> bool:
                observed_serving.append(cluster.serving())
                return observed_serving[-1] == []

            wait_until(none_serving, cluster.lease_ttl + 5, "every master stops serving without etcd", ignore=TRANSIENT)
            holds_for(none_serving, 0.5, "no master serving while etcd is down")
            up_at = time.monotonic()
        finally:
            mc_etcd.start()
        leader = cluster.leader(timeout=30)
        before = len(acks)
        wait_until(lambda: len(acks) >= before + 20, 30, "writes after the outage", ignore=TRANSIENT)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not any(a.start > down_at + 0.1 and a.end < up_at for a in acks), \
        "a write was acknowledged while etcd was down"
    assert all(len(s) <= 1 for s in observed_serving)
    keys = set(cluster.keys(leader))
    lost = [a.key for a in acks if a.key not in keys]
    assert lost == []
    by_seq = sorted(acks, key=lambda a: a.sequence_id)
    assert len({a.sequence_id for a in acks}) == len(acks), "two acks share a sequence id"
    views = [a.view_version for a in by_seq]
    assert views == sorted(views), "an older leader acknowledged after a newer one"
    assert len(set(views)) >= 2, "expected a new leader (view) after the outage"
