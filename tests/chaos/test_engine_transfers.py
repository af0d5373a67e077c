"""The chaos pieces over the Target API: engine B transfers into A while the nemesis kills
and restarts A (a replacement under the same segment name); final reads read A's memory."""

from __future__ import annotations

import pytest

from pytest_mooncake.chaos import EngineTransferClient
from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import (
    bounded_recovery,
    no_phantom_reads,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.nemesis import engine_kill

SLOTS = 8


@pytest.mark.mc_requires("engine", "engine_restart")
def test_transfers_into_a_replaced_engine(mc_chaos, mc_engine) -> None:
    a, b = mc_engine("A"), mc_engine("B")
    result = mc_chaos.run(
        lambda w: EngineTransferClient(b, peers={"A": a}),
        gen.transfers(["A"], slots=SLOTS).stagger(0.01), [engine_kill(a)], workers=1,
        seconds=2.5, quiet=(0.3, 0.6), hold=(0.1, 0.3),
        recovery=6.0,  # writes after the last restart, so every checker has something to judge
        final=gen.final_reads(gen.transfer_keys(["A"], SLOTS), f="read"))
    assert result.faults_injected >= 1
    heals = [op for op in result.history.ops if op.f == "heal" and op.type == "info"]
    assert heals and heals[-1].instance == f"pid-{a.pid}"
    finals = [op for op in result.history.ops if op.final and op.type == "ok"]
    assert len(finals) == SLOTS
    result.check(
        transfers_reach_new_instance,
        lambda h: no_phantom_reads(h, puts=("write",), reads=("read",)),
        bounded_recovery(5.0),
    ).assert_valid()
