"""Public path of the wait helpers suites use (``from pytest_mooncake.waits import wait_until``);
they live in ``pytest_mooncake.runtime.deadlines``."""

from pytest_mooncake.runtime.deadlines import TRANSIENT, Timeout, holds_for, wait_until, within

__all__ = ["TRANSIENT", "Timeout", "holds_for", "wait_until", "within"]
