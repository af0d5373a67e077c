"""The standby state machine's transition table (Mooncake's states and events)."""

from __future__ import annotations

import pytest

from reference_engine.master.standby_state import (
    MAX_CONSECUTIVE_ERRORS,
    TRANSITIONS,
    StandbyEvent,
    StandbyState,
    StandbyStateMachine,
)

S, E = StandbyState, StandbyEvent


def machine_in(state: StandbyState) -> StandbyStateMachine:
    paths = {
        S.STOPPED: [], S.CONNECTING: [E.START], S.SYNCING: [E.START, E.CONNECTED],
        S.WATCHING: [E.START, E.CONNECTED, E.SYNC_COMPLETE],
        S.RECOVERING: [E.START, E.CONNECTED, E.SYNC_COMPLETE, E.MAX_ERRORS_REACHED],
        S.RECONNECTING: [E.START, E.CONNECTED, E.SYNC_FAILED],
        S.PROMOTING: [E.START, E.CONNECTED, E.SYNC_COMPLETE, E.PROMOTE],
        S.PROMOTED: [E.START, E.CONNECTED, E.SYNC_COMPLETE, E.PROMOTE, E.PROMOTION_SUCCESS],
        S.FAILED: [E.START, E.CONNECTION_FAILED],
    }
    sm = StandbyStateMachine()
    for ev in paths[state]:
        assert sm.fire(ev)
    assert sm.state is state
    return sm


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", list(E))
def test_every_state_event_pair_follows_the_table(state, event):
    sm = machine_in(state)
    expected = TRANSITIONS[state].get(event)
    assert sm.fire(event) is (expected is not None)
    assert sm.state is (expected if expected is not None else state)


def test_listeners_only_on_real_changes_and_history():
    sm = machine_in(S.WATCHING)
    seen = []
    sm.on_change(lambda a, b, ev: seen.append((a, b, ev)))
    assert sm.fire(E.WATCH_HEALTHY)
    assert seen == []
    sm.fire(E.PROMOTE)
    assert seen == [(S.WATCHING, S.PROMOTING, E.PROMOTE)]
    assert [t.target for t in sm.history()][-1] is S.PROMOTING


def test_watching_is_the_only_legacy_readiness():
    assert machine_in(S.WATCHING).is_watching
    assert not machine_in(S.SYNCING).is_watching
    assert machine_in(S.SYNCING).is_running and not machine_in(S.STOPPED).is_running


def test_max_errors_moves_watching_to_recovering():
    sm = machine_in(S.WATCHING)
    for _ in range(MAX_CONSECUTIVE_ERRORS - 1):
        assert not sm.record_error()
    assert sm.record_error()
    assert sm.state is S.RECOVERING
