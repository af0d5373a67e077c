"""Fault windows: when each fault of a chaos history was injected and healed.

The nemesis records every action as an ``invoke``/``info`` pair of process ``"nemesis"``
(``f`` = inject/heal, key = subject, value ``{"fault": kind}``). A window runs from the
inject's invoke to the completion of the first heal of the same fault that succeeded (a failed
heal carries ``error``; ``heal_all`` tries again after the run). A fault never healed has
``healed_at`` None and stays open to the end of the history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_mooncake.chaos.checkers import HEAL, INJECT
from pytest_mooncake.chaos.history import INVOKE, NEMESIS, Op


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    subject: str
    injected_at: float
    """Seconds since the history began (the inject's invoke)."""
    healed_at: float | None
    """Seconds; the successful heal's completion, None if never healed."""
    inject_index: int
    heal_index: int | None
    """Index of the heal's completion op."""
    errors: tuple[str, ...] = ()
    """Errors of failed inject/heal actions within this window."""
    instance: str | None = None
    """The new incarnation the heal announced, if any."""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.subject}"

    def end(self, history_end: float) -> float:
        return self.healed_at if self.healed_at is not None else history_end


def fault_kind(op: Op) -> str:
    value = op.value if isinstance(op.value, dict) else {}
    return str(value.get("fault", "fault"))


def fault_windows(ops: Iterable[Op]) -> list[FaultWindow]:
    """Every fault window of the history, in order of injection."""
    open_: dict[str, dict] = {}
    done: list[FaultWindow] = []
    for op in ops:
        if op.process != NEMESIS or op.f not in (INJECT, HEAL):
            continue
        label = f"{fault_kind(op)}:{op.key}"
        if op.f == INJECT and op.type == INVOKE:
            if label in open_:  # injected again while open: close the old one unhealed
                done.append(_window(open_.pop(label), None, None, None))
            open_[label] = {"kind": fault_kind(op), "subject": str(op.key),
                            "injected_at": op.time / 1e9, "inject_index": op.index,
                            "errors": []}
        elif op.type != INVOKE and label in open_:
            if op.error:
                open_[label]["errors"].append(op.error)
            elif op.f == HEAL:
                done.append(_window(open_.pop(label), op.time / 1e9, op.index, op.instance))
    done.extend(_window(w, None, None, None) for w in open_.values())
    return sorted(done, key=lambda w: w.injected_at)


def _window(fields: dict, healed_at: float | None, heal_index: int | None,
            instance: str | None) -> FaultWindow:
    return FaultWindow(kind=fields["kind"], subject=fields["subject"],
                       injected_at=fields["injected_at"], healed_at=healed_at,
                       inject_index=fields["inject_index"], heal_index=heal_index,
                       errors=tuple(fields["errors"]), instance=instance)
