"""The standby state machine, with Mooncake's states, events and transition table.

Transitions not in the table are rejected and leave the state unchanged. Listeners are told
about real changes only, outside the lock.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class StandbyState(enum.IntEnum):
    STOPPED = 0
    CONNECTING = 1
    SYNCING = 2
    WATCHING = 3
    RECOVERING = 4
    RECONNECTING = 5
    PROMOTING = 6
    PROMOTED = 7
    FAILED = 8


class StandbyEvent(str, enum.Enum):
    START = "START"
    STOP = "STOP"
    PROMOTE = "PROMOTE"
    CONNECTED = "CONNECTED"
    CONNECTION_FAILED = "CONNECTION_FAILED"
    DISCONNECTED = "DISCONNECTED"
    SYNC_COMPLETE = "SYNC_COMPLETE"
    SYNC_FAILED = "SYNC_FAILED"
    WATCH_HEALTHY = "WATCH_HEALTHY"
    WATCH_BROKEN = "WATCH_BROKEN"
    RECOVERY_SUCCESS = "RECOVERY_SUCCESS"
    RECOVERY_FAILED = "RECOVERY_FAILED"
    PROMOTION_SUCCESS = "PROMOTION_SUCCESS"
    PROMOTION_FAILED = "PROMOTION_FAILED"
    MAX_ERRORS_REACHED = "MAX_ERRORS_REACHED"
    FATAL_ERROR = "FATAL_ERROR"


class BaselineOutcome(enum.Enum):
    """How a baseline strategy ended, for the standby to act on."""

    SYNCED = "synced"
    """The baseline is in place: the standby marks it complete and fires SYNC_COMPLETE."""
    STOPPED = "stopped"
    """The standby was stopped while building it: nothing to do."""


S, E = StandbyState, StandbyEvent

TRANSITIONS: dict[StandbyState, dict[StandbyEvent, StandbyState]] = {
    S.STOPPED: {E.START: S.CONNECTING},
    S.CONNECTING: {E.CONNECTED: S.SYNCING, E.CONNECTION_FAILED: S.FAILED,
                   E.FATAL_ERROR: S.FAILED, E.STOP: S.STOPPED},
    S.SYNCING: {E.SYNC_COMPLETE: S.WATCHING, E.SYNC_FAILED: S.RECONNECTING,
                E.DISCONNECTED: S.RECONNECTING, E.STOP: S.STOPPED, E.FATAL_ERROR: S.FAILED},
    S.WATCHING: {E.WATCH_BROKEN: S.RECONNECTING, E.DISCONNECTED: S.RECONNECTING,
                 E.MAX_ERRORS_REACHED: S.RECOVERING, E.PROMOTE: S.PROMOTING,
                 E.STOP: S.STOPPED, E.FATAL_ERROR: S.FAILED, E.WATCH_HEALTHY: S.WATCHING},
    S.RECOVERING: {E.RECOVERY_SUCCESS: S.WATCHING, E.RECOVERY_FAILED: S.RECONNECTING,
                   E.DISCONNECTED: S.RECONNECTING, E.STOP: S.STOPPED, E.FATAL_ERROR: S.FAILED},
    S.RECONNECTING: {E.CONNECTED: S.SYNCING, E.WATCH_HEALTHY: S.WATCHING,
                     E.RECOVERY_SUCCESS: S.WATCHING, E.RECOVERY_FAILED: S.RECONNECTING,
                     E.MAX_ERRORS_REACHED: S.FAILED, E.FATAL_ERROR: S.FAILED, E.STOP: S.STOPPED},
    S.PROMOTING: {E.PROMOTION_SUCCESS: S.PROMOTED, E.PROMOTION_FAILED: S.FAILED,
                  E.STOP: S.STOPPED},
    S.PROMOTED: {E.STOP: S.STOPPED},
    S.FAILED: {E.STOP: S.STOPPED, E.START: S.CONNECTING},
}

MAX_CONSECUTIVE_ERRORS = 10
HISTORY_LIMIT = 1000


@dataclass(frozen=True)
class Transition:
    source: StandbyState
    target: StandbyState
    event: StandbyEvent
    at: float


Listener = Callable[[StandbyState, StandbyState, StandbyEvent], None]


class StandbyStateMachine:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = StandbyState.STOPPED
        self._history: deque[Transition] = deque(maxlen=HISTORY_LIMIT)
        self._listeners: list[Listener] = []
        self._errors = 0
        self.transitions_total = 0

    @property
    def state(self) -> StandbyState:
        return self._state

    def history(self) -> list[Transition]:
        with self._lock:
            return list(self._history)

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def fire(self, event: StandbyEvent) -> bool:
        """Apply ``event``; False (state unchanged) when the table has no such transition."""
        with self._lock:
            source = self._state
            target = TRANSITIONS[source].get(event)
            if target is None:
                return False
            self._state = target
            changed = target is not source
            if changed:
                self._history.append(Transition(source, target, event, time.time()))
                self.transitions_total += 1
                if event is not StandbyEvent.WATCH_HEALTHY:
                    self._errors = 0
        if changed:
            for listener in list(self._listeners):
                listener(source, target, event)
        return True

    def record_error(self) -> bool:
        """Count a consecutive error; fires MAX_ERRORS_REACHED at the limit (returns True)."""
        with self._lock:
            self._errors += 1
            reached = self._errors >= MAX_CONSECUTIVE_ERRORS
        if reached:
            self.fire(StandbyEvent.MAX_ERRORS_REACHED)
        return reached

    def reset_errors(self) -> None:
        with self._lock:
            self._errors = 0

    @property
    def is_running(self) -> bool:
        return self._state in (S.SYNCING, S.WATCHING, S.RECOVERING, S.RECONNECTING, S.PROMOTING)

    @property
    def is_connected(self) -> bool:
        return self._state in (S.SYNCING, S.WATCHING, S.RECOVERING, S.PROMOTING)

    @property
    def is_watching(self) -> bool:
        """Mooncake's whole readiness predicate; the legacy profile uses nothing else."""
        return self._state is S.WATCHING
