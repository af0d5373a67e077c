"""A write between two engines as a user judges it: acknowledged, and its bytes in the peer's
buffer. Suites use it for the starting point of a scenario ("B's write reaches A before any
fault") and for recovery waits ("B's writes reach the restarted A").

Mooncake 0.3.10 and 0.3.11 speak TCP protocol v1, which acknowledges a write before its bytes
land: reading the peer's buffer at once can miss them, so the bytes are waited for (``LANDS_S``
at most). A check that read at once made MR-16 FAIL with a bare ``assert False`` on 0.3.10 in
one run of three (issue #23's proof, seed 1101): a harness symptom, not the build's.
"""

from __future__ import annotations

from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until, within

CALL_DEADLINE = 30.0
"""How long one write may take before it counts as hung."""
LANDS_S = 2.0
"""How long an acknowledged write's bytes may take to appear in the peer's buffer."""


def write_seen(writer: Any, peer: Any, payload: bytes, call_deadline: float = CALL_DEADLINE,
               lands_s: float = LANDS_S) -> str | None:
    """None when ``writer``'s write of ``payload`` into the first buffer ``peer`` registered
    (its address as the peer's own descriptor names it) is acknowledged and the bytes are there
    within ``lands_s``; else what was seen instead."""
    own = peer.buffers()[0][0]
    result = within(call_deadline, writer.write_at, peer.segment, own, payload,
                    what=f"a write to {peer.segment}")
    if not result.ok:
        return (f"{writer.segment}'s write of {payload!r} to {peer.segment} at {own:#x} failed: "
                f"{result.error}")
    try:
        wait_until(lambda: peer.local_read(0, len(payload)) == payload, lands_s,
                   f"the acknowledged write of {payload!r} to land in {peer.segment}'s buffer",
                   describe=lambda _: repr(peer.local_read(0, len(payload))))
    except Timeout as exc:
        return (f"{writer.segment}'s write of {payload!r} to {peer.segment} at {own:#x} was "
                f"acknowledged, but {exc}")
    return None


def lands(writer: Any, peer: Any, payload: bytes, lands_s: float = LANDS_S) -> bool:
    """``write_seen`` as a condition for ``wait_until``."""
    return write_seen(writer, peer, payload, lands_s=lands_s) is None


def must_land(writer: Any, peer: Any, payload: bytes) -> None:
    """A scenario's starting point: the write reaches the peer before any fault (an
    AssertionError saying what was seen otherwise)."""
    seen = write_seen(writer, peer, payload)
    assert seen is None, f"before the scenario's fault, between two running engines: {seen}"
