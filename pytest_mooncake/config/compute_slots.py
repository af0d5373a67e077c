"""``--mc-compute-slots``: more xdist workers than cores, without starving the tests that compute.

Most of a suite run waits (leases, failovers, TTLs): on 2 cores a release run at ``-n 2``
keeps the CPU about a quarter busy, so more workers than cores would overlap more waits. The
RDMA explorations are the exception: a real build's pollers spin while a schedule runs, and
four of them at once on two cores stretch their transfers past the suite's deadlines (CO-9 pass
became intermittent at ``-n 4``, docs/speed.md). A *computing* test is one that needs the
controlled scheduler (``mc_requires("scheduler")``); at most N of them run at once.

Two parts, each enough for its own job:

- on the workers, a computing test holds one of N slot files (``flock``) from before its setup
  to after its teardown: never more than N run at once, whatever the scheduler sent (a lock
  dies with its holder, so a killed worker frees its slot);
- on the controller, a load scheduler that sends a computing test only while fewer than N are
  sent and unfinished, and never two to one worker at once (they would run one after the other
  while both count), so a worker waiting for a slot is rare. It learns which tests compute
  from a list each worker writes after collection; without it, it schedules as xdist does.

Only which worker runs a test and when change: every test runs, with the same seed."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.targets.base import Capability

WORKERINPUT_KEY = "mc_compute_slots"
"""``{"dir": ..., "slots": N}`` handed to each worker."""
LIST_SUFFIX = ".computing.json"
COMPUTING = frozenset({Capability.SCHEDULER.value})
"""Capabilities whose tests compute: the controlled scheduler's explorations."""
SLOT_WAIT_S = 3600.0
"""How long a worker waits for a slot before running the test anyway (with a warning): longer
than any test of the suites, so reached only if a slot holder hangs."""
SLOT_POLL_S = 0.05


def computes(item: pytest.Item) -> bool:
    """Whether ``item`` needs a capability that computes (its ``mc_requires`` marks)."""
    return any(cap in COMPUTING for mark in item.iter_markers("mc_requires")
               for cap in mark.args)


def slots_for(spec: str, workers: int, cores: int) -> int:
    """How many computing tests may run at once (0: no limit). ``auto``: the cores, only when
    there are more workers than cores; ``off``: none; ``N``: N with any xdist workers."""
    if workers <= 0 or spec == "off":
        return 0
    if spec == "auto":
        return cores if workers > cores else 0
    return int(spec)


def parse(spec: str) -> str:
    """``auto``, ``off`` or a positive integer, or a ``pytest.UsageError`` naming the value."""
    text = (spec or "auto").strip().lower()
    if text in ("auto", "off") or (text.isdigit() and int(text) > 0):
        return text
    raise pytest.UsageError(f"--mc-compute-slots must be auto, off or a positive number of "
                            f"tests (got {spec!r})")


# ------------------------------------------------------------------------------ the workers


class Slot:
    """One held slot file (released by ``release`` or by the holder's death)."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops its flock
            self.fd = None


def acquire(directory: Path, slots: int, deadline_s: float = SLOT_WAIT_S) -> Slot:
    """Hold the first free of ``slots`` slot files in ``directory``, waiting up to
    ``deadline_s``; past it a warning and an empty slot (the test runs anyway)."""
    end = time.monotonic() + deadline_s
    while True:
        for index in range(slots):
            fd = os.open(directory / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return Slot(fd)
        if time.monotonic() >= end:
            warnings.warn(f"--mc-compute-slots: no free slot of {slots} in {directory} after "
                          f"{deadline_s:g}s; running the test without one", stacklevel=2)
            return Slot(None)
        time.sleep(SLOT_POLL_S)


class WorkerSlots:
    """The worker's side: publish which collected tests compute; hold a slot around each."""

    def __init__(self, directory: Path, slots: int, worker: str):
        self.directory = directory
        self.slots = slots
        self.worker = worker

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        publish(self.directory, self.worker, [i.nodeid for i in session.items if computes(i)])

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        slot = acquire(self.directory, self.slots) if computes(item) else None
        try:
            yield
        finally:
            if slot is not None:
                slot.release()


def publish(directory: Path, worker: str, nodeids: list[str]) -> None:
    final = directory / f"{worker}{LIST_SUFFIX}"
    tmp = directory / f".{worker}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(nodeids))
    os.replace(tmp, final)


def published(directory: Path) -> set[str]:
    """Every node id a worker listed as computing (unreadable lists are skipped)."""
    out: set[str] = set()
    for path in sorted(directory.glob(f"*{LIST_SUFFIX}")):
        try:
            out.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


# ------------------------------------------------------------------------------ the controller


def pick(pending: Iterable[int], want: int, computing: set[int], in_flight: int, slots: int,
         node_has_computing: bool, node_pending: int) -> list[int]:
    """Which of ``pending`` (in order) to send a worker that asks for ``want`` tests: a
    computing test only while fewer than ``slots`` are in flight and the worker holds none;
    if that leaves the worker fewer than the 2 tests an xdist worker needs to start one, the
    next pending tests whatever they are (the worker then waits for a slot)."""
    order = list(pending)
    picked: list[int] = []
    for index in order:
        if len(picked) == want:
            break
        if index in computing:
            if in_flight >= slots or node_has_computing:
                continue
            in_flight += 1
            node_has_computing = True
        picked.append(index)
    for index in order:
        if node_pending + len(picked) >= 2 or len(picked) == want:
            break
        if index not in picked:
            picked.append(index)
    return picked


def make_scheduler(config: pytest.Config, log: Any, directory: Path, slots: int) -> Any:
    """xdist's load scheduling with the slot rule of ``pick`` (xdist imported only here)."""
    from xdist.scheduler import LoadScheduling

    class SlotScheduling(LoadScheduling):
        def __init__(self) -> None:
            super().__init__(config, log)
            self._computing: set[int] | None = None

        def computing(self) -> set[int]:
            if self._computing is None:
                ids = published(directory)
                self._computing = {i for i, nodeid in enumerate(self.collection or ())
                                   if nodeid in ids}
            return self._computing

        def _send_tests(self, node: Any, num: int) -> None:
            computing = self.computing()
            if not computing:
                super()._send_tests(node, num)
                return
            mine = self.node2pending[node]
            in_flight = sum(1 for pend in self.node2pending.values() for i in pend
                            if i in computing)
            picked = pick(self.pending, num, computing, in_flight, slots,
                          any(i in computing for i in mine), len(mine))
            if not picked:
                return
            chosen = set(picked)
            self.pending[:] = [i for i in self.pending if i not in chosen]
            mine.extend(picked)
            node.send_runtest_some(picked)

    return SlotScheduling()


class ControllerSlots:
    """The controller's side: the slot directory, handed to the workers, and the scheduler."""

    def __init__(self, slots: int):
        self.slots = slots
        self.directory = Path(tempfile.mkdtemp(prefix="pytest-mooncake-slots-"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKERINPUT_KEY] = {"dir": str(self.directory), "slots": self.slots}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if getattr(config.option, "dist", "load") != "load":
            return None  # the user chose another distribution: theirs, with the worker limit
        return make_scheduler(config, log, self.directory, self.slots)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def install(config: pytest.Config, spec: str, workers: int) -> None:
    """Register the controller's or the worker's side for ``--mc-compute-slots=spec``."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        given = workerinput.get(WORKERINPUT_KEY)
        if given and not Path(given["dir"]).is_dir():  # a worker on another host (--tx ssh=)
            warnings.warn(f"--mc-compute-slots: the slot directory {given['dir']} is not on "
                          f"this worker's host; its computing tests take no slot", stacklevel=1)
        elif given:
            config.pluginmanager.register(
                WorkerSlots(Path(given["dir"]), int(given["slots"]),
                            str(workerinput.get("workerid", "gw"))), "mc-compute-slots")
        return
    slots = slots_for(spec, workers, os.cpu_count() or 1)
    if slots <= 0 or not config.pluginmanager.hasplugin("xdist"):
        return
    controller = ControllerSlots(slots)
    config.add_cleanup(controller.close)
    config.pluginmanager.register(controller, "mc-compute-slots")
