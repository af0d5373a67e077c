"""Stale completions, from a process's post and poll logs: a completion the application polled
after the wr_id it carries had been posted again on another QP (a retried slice reusing its
wr_id while the old attempt's completion could still arrive: the CO RFC's stale-completion
hazard). Whether the application then acted on it wrongly is the scenario's to judge; this
says which polled completions were ambiguous, and with which posts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_mooncake.verbs.control import PostedWr
from pytest_mooncake.verbs.points import PolledCompletion


@dataclass(frozen=True)
class StaleCompletion:
    polled: PolledCompletion
    own: PostedWr  # the post it completes
    again: PostedWr  # the later post of the same wr_id on another QP, before the poll

    def __str__(self) -> str:
        return (f"completion of wr_id {self.polled.wr_id:#x} on QP {self.polled.qp} "
                f"({self.polled.status}, post #{self.own.n}) polled (poll #{self.polled.n}) after "
                f"the same wr_id was posted again on QP {self.again.qp} (post #{self.again.n})")


def stale_polls(posts: Sequence[PostedWr], polls: Sequence[PolledCompletion]) -> list[StaleCompletion]:
    by_wr: dict[int, list[PostedWr]] = {}
    for p in posts:
        if not p.refused:
            by_wr.setdefault(p.wr_id, []).append(p)
    found = []
    for c in polls:
        before = [p for p in by_wr.get(c.wr_id, ()) if p.n <= c.after_post]
        own = [p for p in before if p.qp == c.qp]
        if not own:
            continue
        again = [p for p in before if p.n > own[-1].n and p.qp != c.qp]
        if again:
            found.append(StaleCompletion(c, own[-1], again[0]))
    return found
