"""SIGTERM and SIGINT stop a server process, whichever thread the kernel hands them to.

Python runs signal handlers in the main thread only, between bytecodes. A signal the kernel
delivers to another thread (a server has many, and they come and go) does not interrupt the main
thread's wait on a lock: a main thread parked in ``Event.wait(3600)`` slept through SIGTERM for
the hour (4 engines of 15 in a loop of connect, idle 1.2 s, close, SIGTERM). Waiting in short
slices bounds that to one slice.
"""

from __future__ import annotations

import signal
import threading

SLICE = 0.2
"""Seconds between two looks at the stop flag (and at signals that went to other threads)."""


def stop_on_signals(stopped: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stopped`` (call from the main thread)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())


def wait_until_stopped(stopped: threading.Event) -> None:
    """Block the main thread until ``stopped`` is set, by a signal or by another thread."""
    while not stopped.wait(SLICE):
        pass
