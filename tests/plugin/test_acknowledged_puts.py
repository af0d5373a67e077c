"""``put_fresh``: our own retried put meeting its first attempt is the put's success when the
object reads back, and an error of the harness (not a FAIL) when it does not. The client is
an in-memory stand-in answering as the store clients do (a unit test of one function)."""

from __future__ import annotations

import pytest

from pytest_mooncake.acknowledged_puts import put_fresh
from pytest_mooncake.targets import PreconditionUnestablished


class RetriedClient:
    """A client whose put timed out on the first attempt and whose retry met it."""

    def __init__(self, error: str, readable: bool):
        self.error = error
        self.readable = readable

    def put(self, key, size):
        return {"ok": False, "error": self.error, "result": {}}

    def get(self, key):
        return ({"ok": True, "result": {"size": 64}} if self.readable
                else {"ok": False, "error": "OBJECT_NOT_FOUND"})


@pytest.mark.parametrize("error", ["put returned rc=-705", "OBJECT_ALREADY_EXISTS: key 'k3' exists"])
def test_already_exists_of_our_own_readable_put_is_its_success(error) -> None:
    assert put_fresh(RetriedClient(error, readable=True), "k3")["ok"]


def test_already_exists_of_an_unreadable_put_is_an_unestablished_precondition() -> None:
    with pytest.raises(PreconditionUnestablished, match=r"put k3 .*rc=-705.*OBJECT_NOT_FOUND"):
        put_fresh(RetriedClient("put returned rc=-705", readable=False), "k3")


def test_any_other_refusal_is_the_builds_answer() -> None:
    answer = put_fresh(RetriedClient("put returned rc=-200", readable=True), "k3")
    assert answer == {"ok": False, "error": "put returned rc=-200", "result": {}}
