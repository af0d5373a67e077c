"""A store-client call to a dead rfc leader never blocks forever: a call in flight when the leader
is SIGKILLed, and one issued just after, both return (success after a reattach, or an error)
within the configured reattach bound plus one call timeout and a margin. Checked with thread
joins against a deadline, with and without a standby to take over (multi-process, real etcd)."""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

import pytest

from pytest_mooncake.waits import wait_until
from reference_engine.master.error_codes import MasterError
from reference_engine.master.model import SegmentInfo
from reference_engine.master.store_client import _Link

REATTACH_TIMEOUT = 1.5
CALL_TIMEOUT = 1.0
MARGIN = 3.0
BOUND = REATTACH_TIMEOUT + CALL_TIMEOUT + MARGIN


class Call(threading.Thread):
    """One ``exists`` call in its own thread; ``outcome`` is ("ok", value), ("error", code) for
    a MasterError, or ("raised", text) for anything else."""

    def __init__(self, client, key: str, name: str):
        super().__init__(daemon=True, name=name)
        self.client, self.key = client, key
        self.outcome: tuple[str, object] | None = None
        self.deadline = 0.0

    def start(self) -> None:
        self.deadline = time.monotonic() + BOUND
        super().start()

    def run(self) -> None:
        try:
            self.outcome = ("ok", self.client.exists(self.key))
        except MasterError as exc:
            self.outcome = ("error", exc.code.value)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.outcome = ("raised", f"{type(exc).__name__}: {exc}")


def inside_link_call(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``_Link.call`` (the request issued on the leader's link)."""
    frame = sys._current_frames().get(thread.ident)  # noqa: SLF001
    return frame is not None and any(f.f_code is _Link.call.__code__
                                     for f, _ in traceback.walk_stack(frame))


@pytest.mark.mc_req("MP-7")
@pytest.mark.parametrize("masters", [1, 2], ids=["no-successor", "standby-takes-over"])
def test_call_to_a_sigkilled_leader_returns_within_the_reattach_bound(cluster_factory, masters):
    cluster = cluster_factory("rfc", masters=masters, reattach_timeout=REATTACH_TIMEOUT)
    client = cluster.library_client(
        client_id="caller", call_timeout=CALL_TIMEOUT,
        segment=SegmentInfo("caller", "caller@127.0.0.1", 1 << 40, 1 << 30)).start(wait=10)
    client.put("before", 32)
    old = cluster.leader()

    # Freeze the leader so the next call is issued and gets no answer, then kill it under the call.
    cluster.masters[old].process.send_signal(signal.SIGSTOP)
    in_flight = Call(client, "before", "in-flight call")
    in_flight.start()
    wait_until(lambda: inside_link_call(in_flight) or in_flight.outcome, 5,
               "the call to be issued on the frozen leader's link")
    assert in_flight.outcome is None, f"answered by a frozen leader: {in_flight.outcome}"
    cluster.kill_master(old)
    issued_after = Call(client, "before", "call issued after the kill")
    issued_after.start()

    for call in (in_flight, issued_after):
        call.join(max(0.0, call.deadline - time.monotonic()))
        assert not call.is_alive(), (
            f"the {call.name} had not returned {BOUND:g}s after it started (reattach_timeout "
            f"{REATTACH_TIMEOUT:g}s + call_timeout {CALL_TIMEOUT:g}s + {MARGIN:g}s margin)")
        assert call.outcome is not None and call.outcome[0] in ("ok", "error"), call.outcome
        if masters == 1:
            assert call.outcome == ("error", "RPC_FAIL"), call.outcome
        elif call.outcome[0] == "ok":
            assert call.outcome[1] is True

    if masters == 2:
        new = cluster.leader(timeout=15)
        assert new != old
        wait_until(lambda: client.leader == cluster.masters[new].address, 15,
                   "the client to reattach to the new leader")
        assert client.exists("before") is True
