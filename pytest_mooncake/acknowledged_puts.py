"""A put the harness makes as a test's precondition, with our own retry told from the build's
refusal: a store client that retries a put after a timeout may find the first attempt already
taken (``OBJECT_ALREADY_EXISTS``) although nothing but this test wrote the key."""

from __future__ import annotations

import re
from typing import Any

from pytest_mooncake.targets.base import PreconditionUnestablished

ALREADY_EXISTS = re.compile(r"OBJECT_ALREADY_EXISTS|rc=-705\b")
"""How a put answers that the key exists (the reference's code; the build's return code)."""


def put_fresh(client: Any, key: str, size: int = 64) -> dict[str, Any]:
    """Put this test's own fresh ``key``; the client's answer. 'Already exists' is our retried
    put meeting its first attempt: when the object reads back the put succeeded (the get's
    answer is returned); otherwise the harness could not establish its precondition
    (``PreconditionUnestablished`` naming both answers: an error, not a FAIL of the build)."""
    answer = client.put(key, size)
    if answer["ok"] or not ALREADY_EXISTS.search(str(answer.get("error"))):
        return answer
    got = client.get(key)
    if got["ok"]:
        return got
    raise PreconditionUnestablished(
        f"precondition: put {key} (a fresh key of this test) was answered {answer} and a get of "
        f"it {got}: a retry of our own put found the first attempt taken but not readable")
