"""Which lane of a chaos report an operation belongs to: the nemesis, a worker, or the final reads.

The runner retires a process whose op ended ``info`` and continues the worker under process id
``process + workers`` (the recovery phase uses ``workers + w`` likewise), so ``process % workers``
is the worker across all its incarnations. One lane per worker keeps a run with hundreds of
retired processes readable; the process id stays in each op's details. Without the worker count
every process gets its own lane, as in Jepsen's timeline.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_mooncake.chaos.history import NEMESIS, Op

FINAL = "final reads"


def lane_of(op: Op, workers: int | None) -> str:
    if op.process == NEMESIS:
        return NEMESIS
    if op.final:
        return FINAL
    if workers and isinstance(op.process, int):
        return f"worker {op.process % workers}"
    return f"process {op.process}"


def lane_order(lane: str) -> tuple[int, int, str]:
    """Sort key: nemesis, then workers by number, then final reads."""
    if lane == NEMESIS:
        return (0, 0, lane)
    if lane == FINAL:
        return (2, 0, lane)
    number = lane.rsplit(" ", 1)[-1]
    return (1, int(number) if number.isdigit() else 0, lane)


def lanes(ops: Iterable[Op], workers: int | None) -> list[str]:
    """The lanes present, in reading order."""
    return sorted({lane_of(op, workers) for op in ops}, key=lane_order)
