"""Replay tokens printed by earlier runs stay valid: every token of fixtures/replay/tokens-v1.json
(seed tokens of PCT and random-walk explorations, exact choice-sequence tokens, pinned
interleavings; failing legacy schedules and passing rfc ones) replays to the schedule it named:
the same violations, the same number of steps, the same (actor, point) trace.

A change of the scheduler, a strategy or the simulated RDMA path that moves any of these breaks
the tokens users hold; it must keep them (a new strategy gets a new name) or version the token
format with a clear error for the old one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from reference_engine.rdma.sim.exploration import replay

CORPUS = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "replay" /
                     "tokens-v1.json").read_text())


def trace_sha(trace) -> str:
    return hashlib.sha256(repr(trace).encode()).hexdigest()[:16]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["why"] for e in CORPUS])
def test_recorded_tokens_replay_the_same_schedule(entry):
    exact = replay(entry["exact_token"], record_trace=True)
    assert sorted({v.kind for v in exact.violations}) == entry["violations"]
    assert exact.steps == entry["steps"]
    assert trace_sha(exact.trace) == entry["trace_sha"], (
        f"the exact token of '{entry['why']}' now drives another schedule")
    again = replay(entry["token"], record_trace=True)
    assert sorted({v.kind for v in again.violations}) == entry["violations"]
    assert trace_sha(again.trace) == entry["trace_sha"], (
        f"the strategy token of '{entry['why']}' ({again.token}) now drives another schedule")
