"""Slices and tasks: the transfer fragments the worker pool posts, and the requests they make up.

A slice carries an ``attempt`` id that every retry or handoff increases (CO-4). Under the legacy
profile it also carries the raw ``endpoint``/``qp_depth`` of its last post, as Mooncake's does.
"""

from __future__ import annotations

import threading

PENDING = 0
POSTED = 1
SUCCESS = 2
FAILED = 3
STATUS_NAMES = ("PENDING", "POSTED", "SUCCESS", "FAILED")


class Task:
    """One transfer request: finished when every slice succeeded or failed."""

    __slots__ = ("slice_count", "success", "failed", "transferred", "target", "slices")

    def __init__(self, target: str):
        self.target = target
        self.slice_count = 0
        self.success = 0
        self.failed = 0
        self.transferred = 0
        self.slices: list[Slice] = []

    @property
    def done(self) -> bool:
        return self.success + self.failed >= self.slice_count

    def status(self) -> str:
        if not self.done:
            return "WAITING"
        return "FAILED" if self.failed else "COMPLETED"


class Slice:
    __slots__ = (
        "index", "task", "opcode", "source_addr", "length", "target", "dest_addr",
        "peer_nic_path", "dest_rkey", "source_lkey", "device_id", "ctx_index", "status",
        "retry_cnt", "max_retry_cnt", "attempt", "endpoint", "qp_depth", "n_success", "n_failed",
    )

    def __init__(self, task: Task, opcode: int, source_addr: int, length: int, dest_addr: int,
                 max_retry_cnt: int):
        self.index = -1
        self.task = task
        self.opcode = opcode
        self.source_addr = source_addr
        self.length = length
        self.target = task.target
        self.dest_addr = dest_addr
        self.peer_nic_path = ""
        self.dest_rkey = 0
        self.source_lkey = 0
        self.device_id = -1
        self.ctx_index = -1
        self.status = PENDING
        self.retry_cnt = 0
        self.max_retry_cnt = max_retry_cnt
        self.attempt = 0
        self.endpoint = None
        self.qp_depth = None
        self.n_success = 0
        self.n_failed = 0

    def mark_success(self) -> None:
        self.status = SUCCESS
        self.n_success += 1
        self.task.success += 1
        self.task.transferred += self.length

    def mark_failed(self) -> None:
        self.status = FAILED
        self.n_failed += 1
        self.task.failed += 1

    @property
    def terminal(self) -> bool:
        return self.status >= SUCCESS

    def __repr__(self) -> str:
        return (f"Slice(#{self.index} {STATUS_NAMES[self.status]} attempt={self.attempt} "
                f"retry={self.retry_cnt} path={self.peer_nic_path!r})")


class SliceTable:
    """Small integer handles for slices: the legacy wr_id (a stand-in for ``Slice*``)."""

    def __init__(self) -> None:
        self.slots: list[Slice | None] = []
        self.free: list[int] = []
        self.lock = threading.Lock()

    def add(self, s: Slice) -> None:
        with self.lock:
            if self.free:
                i = self.free.pop()
                self.slots[i] = s
            else:
                i = len(self.slots)
                self.slots.append(s)
        s.index = i

    def remove(self, s: Slice) -> None:
        with self.lock:
            if 0 <= s.index < len(self.slots) and self.slots[s.index] is s:
                self.slots[s.index] = None
                self.free.append(s.index)
