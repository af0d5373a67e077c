"""Waiting with a deadline: the one wait loop of the framework.

Suites, fixtures, targets and process readiness all wait through ``wait_until``; nothing else
sleeps in a loop. ``Timeout`` is both an ``AssertionError`` (a liveness wait that never held
is a failed check) and a ``TimeoutError`` (callers that treat it as an I/O deadline can).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


TRANSIENT: tuple[type[BaseException], ...] = (OSError, ValueError)
"""What a server that is starting, restarting or failing over answers for a moment (a refused or
reset connection, a half-written or non-JSON body): ``wait_until(..., ignore=TRANSIENT)``."""


class Timeout(TimeoutError, AssertionError):
    """A condition did not hold before its deadline; the message says what was awaited and
    what was last observed."""


def wait_until(
    probe: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.01,
    max_interval: float = 0.2,
    describe: Callable[[T | None], str] | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``probe`` until it returns something truthy; return that. Raises ``Timeout`` naming
    ``what`` (and the last value, through ``describe``) when ``timeout`` seconds pass first.

    An exception of a type in ``ignore`` counts as "not yet" (e.g. a refused connection while a
    server restarts) and is named in the message if it was the last thing seen; any other
    exception ends the wait at once (a probe may raise to say the condition can no longer
    hold, e.g. the process it waits for exited)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    error: BaseException | None = None
    while True:
        try:
            last, error = probe(), None
        except ignore as exc:
            last, error = None, exc
        if last:
            return last
        if time.monotonic() >= deadline:
            if error is not None:
                seen = f"{type(error).__name__}: {error}"
            else:
                seen = describe(last) if describe else repr(last)
            raise Timeout(f"timed out after {timeout:g}s waiting for {what}; last observed: {seen}")
        time.sleep(interval)
        interval = min(interval * 2, max_interval)


def holds_for(probe: Callable[[], bool], duration: float, what: str,
              interval: float = 0.02) -> None:
    """Check ``probe`` repeatedly for ``duration`` seconds; raise AssertionError naming ``what``
    at the first observation where it does not hold (a bounded safety observation)."""
    deadline = time.monotonic() + duration
    checks = 0
    while True:
        if not probe():
            raise AssertionError(f"{what} stopped holding after {checks} good observations")
        checks += 1
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def within(deadline: float, fn: Callable[..., T], *args: object, what: str, **kwargs: object) -> T:
    """Run ``fn`` in a helper thread; its result, or ``Timeout`` naming ``what`` if it has not
    returned after ``deadline`` seconds (the thread is left to finish on its own)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=f"within:{what}")
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        raise Timeout(f"{what} did not return within {deadline:g}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
