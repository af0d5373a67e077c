"""The CO-9 invariant checker: observes a run through hooks and checks the end state.

During the run (hooks called by the fabric and the pool):
- a completion may change a slice (success, failure, retry) only if it belongs to the slice's
  owning post: the last post of the slice, with no retry since (CO-4);
- a completion or async event may retire only the endpoint that owns its QP (CO-5);
- nothing is posted on an endpoint that already left the active map (CO-7).
At quiescence (``check_final``):
- every slice ended exactly once: never both successful and failed, never twice, never stuck;
- QP depth and CQ outstanding never went negative and are zero; no token leaked (CO-3);
- QP depth never exceeded the send queue's ``max_wr``, CQ outstanding never the CQ's entries:
  work that does not fit waits (CO-3: it holds nothing until posted); a NIC refuses WRs past a
  full send queue and overruns a full CQ, losing completions;
- retired endpoints were reclaimed (waiting lists empty).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_engine.rdma import slices as S


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class InvariantChecker:
    def __init__(self) -> None:
        self.transports: list = []
        self.violations: list[Violation] = []
        self.owning_post: dict = {}
        self.slices: list = []
        self.posts: dict = {}
        """slice -> [(seq, qp_num, wr_id)] of every WR posted for it."""
        self.posters: list = []
        """The transports whose WRs ``on_wr_posted`` (the fabric's hook) records."""

    def watch(self, transport) -> None:
        self.transports.append(transport)
        self.posters.append(transport)
        for ctx in transport.contexts:
            ctx.store.everything = []

    def watch_posts(self, transport) -> None:
        """Record ``transport``'s WRs as the fabric posts them (``posts``), and nothing else: for
        a transport running with no observer, as every deployed engine does. The engine is not
        touched (``on_wr_posted`` reads its wr_id -> slice map); ``check_final`` does not judge
        it."""
        self.posters.append(transport)

    def _fail(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind, detail))

    def track(self, slices) -> None:
        self.slices.extend(slices)

    # ------------------------------------------------------------------ hooks
    def on_wr_posted(self, seq: int, qp_num: int, wr_id: int) -> None:
        for tr in self.posters:
            for ctx in tr.contexts:
                if qp_num in ctx.qp_owner:
                    s = tr.ownership.peek(wr_id)
                    if s is not None:
                        self.owning_post[s] = seq
                        posts = self.posts.get(s)
                        if posts is None:
                            self.posts[s] = [(seq, qp_num, wr_id)]
                        else:
                            posts.append((seq, qp_num, wr_id))
                    return

    def on_post(self, ep, batch) -> None:
        if not ep.in_map or ep.retired:
            self._fail("post_to_retired",
                       f"{len(batch)} WR(s) posted on {ep!r} after it left the active map")

    def on_effect(self, wc, s, kind: str) -> None:
        owner = self.owning_post.get(s)
        if owner != wc.seq:
            self._fail("stale_mutation",
                       f"completion seq {wc.seq} (qp {wc.qp_num}) caused {kind} of {s!r} whose "
                       f"owning post is {owner}")
        if kind == "success" and s.terminal:
            self._fail("double_completion", f"{s!r} completed again by seq {wc.seq}")

    def on_retry(self, s) -> None:
        self.owning_post[s] = None
        if s.terminal:
            self._fail("retry_after_end", f"{s!r} retried after it ended")

    def on_completion_retire(self, wc, ep) -> None:
        if wc.qp_num not in ep.qp_nums:
            self._fail("stale_retire",
                       f"completion on qp {wc.qp_num} retired {ep!r} (qps {ep.qp_nums})")

    def on_event_retire(self, qp_num: int, ep) -> None:
        if qp_num not in ep.qp_nums:
            self._fail("stale_retire",
                       f"QP-fatal event for qp {qp_num} retired {ep!r} (qps {ep.qp_nums})")

    # ------------------------------------------------------------------ end state
    def check_final(self, quiescent: bool = True, crash: str | None = None) -> list[Violation]:
        if crash is not None:
            self._fail("actor_crashed", crash)
            return self.violations
        if not quiescent:
            self._fail("no_quiescence", "the run did not become quiescent within its step budget")
        for s in self.slices:
            if s.n_success and s.n_failed:
                self._fail("success_and_failed", f"{s!r} succeeded and failed")
            elif s.n_success + s.n_failed > 1:
                self._fail("double_completion", f"{s!r} ended {s.n_success + s.n_failed} times")
            elif quiescent and s.n_success + s.n_failed == 0:
                self._fail("stuck_slice", f"{s!r} never ended (status {S.STATUS_NAMES[s.status]})")
        for tr in self.transports:
            if tr.defunct:
                continue
            for ctx in tr.contexts:
                for cq, c in ctx.cqs:
                    cqe = getattr(cq, "cqe", None)
                    if c.low < 0:
                        self._fail("negative_counter", f"{c!r} went negative")
                    elif quiescent and c.value != 0:
                        self._fail("counter_leak", f"{c!r} is not zero at quiescence")
                    if cqe is not None and c.high > cqe:
                        self._fail("over_capacity", (
                            f"{c!r} counted {c.high} completions outstanding on a CQ of {cqe} "
                            f"entries: a NIC overruns it and loses completions"))
                for ep in ctx.store.everything or ():
                    for d in ep.depth:
                        if d.low < 0:
                            self._fail("negative_counter", f"{d!r} went negative")
                        elif quiescent and d.value != 0 and ep.state != "DESTROYED":
                            self._fail("counter_leak", f"{d!r} of {ep!r} is not zero")
                        if ep.max_wr and d.high > ep.max_wr:
                            self._fail("over_capacity", (
                                f"{d!r} of {ep!r} counted {d.high} WRs outstanding on a send "
                                f"queue of {ep.max_wr}: a NIC refuses the WRs past it"))
                if quiescent and ctx.store.waiting:
                    self._fail("not_reclaimed", f"{ctx.store.waiting!r} still waiting")
            if quiescent and tr.ownership.outstanding():
                self._fail("token_leak", f"{tr.ownership.outstanding()} tokens never released")
        return self.violations
