"""Waiting on a condition with a deadline: the only synchronisation suites and fixtures use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    """A condition did not hold before its deadline; the message says what was awaited and
    what was last observed."""


def wait_until(
    probe: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.01,
    max_interval: float = 0.2,
    describe: Callable[[T | None], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something truthy; return that. Raises ``Timeout`` naming
    ``what`` (and the last value, through ``describe``) when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
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
    import threading  # noqa: PLC0415

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
