"""The nemesis with network and metadata faults on real components: a proxy of the embedded
Toxiproxy-compatible server (partition, latency) in front of the loopback KV server, and the
session's real etcd stopped and started under an etcd3 workload."""

from __future__ import annotations

import itertools
import uuid

from etcd3.exceptions import ConnectionFailedError, ConnectionTimeoutError
from kv_client import KvClient, start_server

from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import (
    bounded_recovery,
    no_lost_acks,
    no_phantom_reads,
    no_stale_reads,
)
from pytest_mooncake.chaos.generator import OpSpec
from pytest_mooncake.chaos.history import NEMESIS
from pytest_mooncake.chaos.nemesis import Nemesis, etcd_outage, latency, partition, process_kill
from pytest_mooncake.chaos.runner import fail, info, ok

CHECKS = (no_lost_acks, no_stale_reads, no_phantom_reads, bounded_recovery(15.0))


def _injected(result) -> list[str]:
    return [f"{op.value['fault']}:{op.key}" for op in result.history.ops
            if op.process == NEMESIS and op.f == "inject" and op.type == "invoke"]


def test_partition_latency_and_kill_through_a_proxy(mc_chaos, mc_processes, mc_faults,
                                                     tmp_path) -> None:
    port, server = start_server(mc_processes, tmp_path, "durable")
    proxy, listen = mc_faults.proxy("kv", f"127.0.0.1:{port}")
    proxied = int(listen.rpartition(":")[2])
    faults = [partition(proxy, "kv-net"), latency(proxy, ms=30, subject="kv-net"),
              process_kill(server, "kv")]
    result = mc_chaos.run(lambda w: KvClient(proxied), gen.kv(keys=16).stagger(0.004), faults,
                          seconds=3.0, final=gen.final_reads(16), quiet=(0.1, 0.3),
                          hold=(0.1, 0.3), each_fault=1)
    result.check(*CHECKS).assert_valid()
    injected = _injected(result)
    assert injected, "no fault injected"
    plan = itertools.islice(Nemesis(faults, result.seed).plan(), len(injected))
    assert injected == [step.fault.label for step in plan], "the faults did not follow the plan"
    assert proxy.enabled or mc_faults.client().get_proxy(proxy.name).enabled
    assert not mc_faults.client().get_proxy(proxy.name).toxics(), "latency toxic left behind"


class EtcdKv:
    """put/get/remove on keys under a per-test prefix through the etcd3 client. A client whose
    call could not reach etcd is replaced: its channel can go on failing for 12 s after etcd is
    back (``reference_engine/etcd_connection.py``), longer than the recovery bound checked."""

    def __init__(self, etcd, prefix: str):
        self.etcd = etcd
        self.client = etcd.client(timeout=2.0)
        self.prefix = prefix

    def invoke(self, spec: OpSpec):
        key = self.prefix + spec.key
        try:
            if spec.f == "put":
                self.client.put(key, spec.value)
                return ok()
            if spec.f == "get":
                value, _ = self.client.get(key)
                return ok(value.decode() if value is not None else None)
            if spec.f == "remove":
                return ok(self.client.delete(key))
        except Exception as exc:  # etcd3 raises its own errors and grpc's
            if isinstance(exc, (ConnectionFailedError, ConnectionTimeoutError)):
                self.client.close()
                self.client = self.etcd.client(timeout=2.0)
            message = f"{type(exc).__name__}: {exc}"
            return fail(message) if spec.f == "get" else info(message)
        return fail(f"unknown op {spec.f}")

    def close(self) -> None:
        self.client.close()


def test_etcd_stop_start(mc_chaos, mc_etcd) -> None:
    prefix = f"/mc-chaos/{uuid.uuid4().hex}/"
    result = mc_chaos.run(lambda w: EtcdKv(mc_etcd, prefix), gen.kv(keys=8).stagger(0.01),
                          [etcd_outage(mc_etcd)], seconds=3.0, workers=2,
                          final=gen.final_reads(8), quiet=(0.3, 0.6), hold=(0.2, 0.5),
                          each_fault=1, recovery=6.0)  # recovery: bounded_recovery judges the heal
    result.check(*CHECKS).assert_valid()
    assert _injected(result), "etcd was never stopped"
    assert mc_etcd.healthy()
    assert result.counts["fail"] + result.counts["info"] > 0, "the outage was not observed"
