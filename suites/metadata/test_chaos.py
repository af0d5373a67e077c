"""MR-16 under a nemesis: B keeps transferring into A while A is killed and restarted under the
same segment name and B's metadata network is cut, on a seeded schedule; the recorded history
is judged afterwards (Jepsen's split: client, nemesis, generator, checker)."""

from __future__ import annotations

import pytest

from pytest_mooncake.chaos import EngineTransferClient
from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import (
    bounded_recovery,
    no_phantom_reads,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.nemesis import engine_kill, partition

SLOTS = 8
RECOVERY_BOUND = 5.0

pytestmark = pytest.mark.mc_requires("engine", "engine_restart")


@pytest.mark.mc_req("MR-16")
def test_transfers_survive_restarts_and_metadata_partitions(mc_chaos, mc_engine, mc_faults,
                                                            mc_metadata):
    proxy, listen = mc_faults.proxy("metadata", mc_metadata.address)
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=mc_metadata.through(listen), prefer_ttl_ms=200)
    result = mc_chaos.run(
        lambda worker: EngineTransferClient(b, peers={"seg-a": a}),
        gen.transfers(["seg-a"], slots=SLOTS).stagger(0.01),
        [engine_kill(a), partition(proxy, "B's metadata network")],
        workers=1, seconds=min(mc_chaos.seconds, 4.0), quiet=(0.3, 0.6), hold=(0.1, 0.4),
        recovery=RECOVERY_BOUND + 1.0, each_fault=1,  # a restart of A happens on any machine
        final=gen.final_reads(gen.transfer_keys(["seg-a"], SLOTS), f="read"))
    assert result.faults_injected >= 1, "the nemesis injected nothing in the time it had"
    result.check(
        transfers_reach_new_instance,
        lambda h: no_phantom_reads(h, puts=("write",), reads=("read",)),
        bounded_recovery(RECOVERY_BOUND),
    ).assert_valid()
