"""Client of the scheduling points of one process on emulated devices (csrc/points.c).

With the points on, every ``ibv_post_send``, ``ibv_poll_cq`` of a CQ holding completions,
``ibv_modify_qp`` changing a state, ``ibv_destroy_qp`` and ``ibv_get_async_event`` parks the
calling thread, and every completion is held instead of reaching its CQ. ``wait_quiet`` answers
once the parked threads and held completions stopped changing for a quiet window: that set is
what may run next (a thread blocked elsewhere did not park in the window). ``grant`` lets one
parked thread go; ``VerbsControl.release`` delivers one held completion. ``off`` lets everyone
go and delivers everything held by the points.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_mooncake.verbs.control import HeldCompletion, VerbsControl, _from


@dataclass(frozen=True)
class ParkedCall:
    """A thread parked at a verbs call, waiting for the controller."""

    id: int
    tid: int
    point: str  # post, poll, modify, destroy, event
    qp: int = 0
    cq: int = 0
    wr_id: int = 0
    arg: int = 0  # post: WRs in the chain; modify: the next state; event: its type
    waited_us: int = 0


@dataclass(frozen=True)
class AckWait:
    """A thread inside ``ibv_destroy_qp``/``ibv_destroy_cq`` waiting for the application to
    acknowledge async events it was handed (rdma-core returns only after every one is)."""

    tid: int
    what: str  # qp, cq
    qp: int = 0
    unacked: int = 0
    reader: int = 0  # the thread that read the QP's last event (0: none read yet)
    ctx_reader: int = 0  # the thread that last asked the QP's device for events (0: none)
    waited_us: int = 0
    call: str = "destroy"

    @property
    def acker(self) -> int:
        """The thread whose acknowledgement (or reading) the destroy waits for, if known."""
        return self.reader or self.ctx_reader

    def describe(self) -> str:
        obj = f"QP {self.qp}" if self.what == "qp" else "a CQ"
        who = (f" read by thread {self.reader}" if self.reader else
               f" (thread {self.ctx_reader} reads the device's events)" if self.ctx_reader
               else "")
        return (f"thread {self.tid} has waited {self.waited_us / 1e6:.1f} s in ibv_destroy_"
                f"{self.what} of {obj} for {self.unacked} async event(s){who} to be "
                f"acknowledged")


@dataclass(frozen=True)
class PointsState:
    on: bool
    points: int  # calls parked since the points went on
    timeouts: int  # parked calls that went on alone (the controller did not answer in time)
    parked: tuple[ParkedCall, ...]
    held: tuple[HeldCompletion, ...]
    quiet_us: int  # since the last change
    timed_out: bool  # wait_quiet's deadline came before a quiet window
    ack_waits: tuple[AckWait, ...] = ()  # destroys blocked on an unacknowledged event


@dataclass(frozen=True)
class PolledCompletion:
    """One completion ``ibv_poll_cq`` handed to the application (the process's poll log)."""

    n: int
    after_post: int  # posts 1..after_post of the post log came before this poll
    qp: int
    cq: int
    wr_id: int
    status: str
    tid: int


class SchedulingPoints:
    """The ``sched`` and ``polls`` commands of one process's control socket."""

    def __init__(self, control: VerbsControl):
        self.control = control

    def on(self, park_ms: int = 0) -> None:
        """Turn the points on; ``park_ms`` (0: the process's default, 10 s): how long a parked
        thread waits for a grant before it goes on alone (and is counted in ``timeouts``)."""
        self.control.request(f"sched on park_ms={int(park_ms)}")

    def off(self) -> int:
        """Every parked thread goes on; every completion the points held is delivered."""
        return self.control.request("sched off").fields["released"]

    def grant(self, call_id: int) -> None:
        self.control.request(f"sched grant id={int(call_id)}")

    def state(self) -> PointsState:
        return self._state(self.control.request("sched state"))

    def wait_quiet(self, quiet_us: int, timeout: float) -> PointsState:
        """The parked threads and held completions once nothing changed for ``quiet_us``
        (answered by the process; at ``timeout`` s with ``timed_out`` set)."""
        ms = max(1, int(timeout * 1000))
        return self._state(self.control.request(
            f"sched wait quiet_us={int(quiet_us)} timeout_ms={ms}", timeout=timeout + 5))

    def polls(self, since: int = 0) -> list[PolledCompletion]:
        reply = self.control.request(f"polls since={int(since)}")
        return [_from(PolledCompletion, d) for kind, d in reply.lines if kind == "polled"]

    @staticmethod
    def _state(reply) -> PointsState:
        f = reply.fields
        parked = tuple(_from(ParkedCall, d) for kind, d in reply.lines if kind == "parked")
        held = tuple(_from(HeldCompletion, d) for kind, d in reply.lines if kind == "held")
        waits = tuple(_from(AckWait, d) for kind, d in reply.lines if kind == "waiting")
        return PointsState(f.get("sched") == "on", f.get("points", 0), f.get("timeouts", 0),
                           parked, held, f.get("quiet_us", 0), bool(f.get("timed_out", 0)),
                           waits)
