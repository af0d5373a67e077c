"""The nemesis: injects and heals faults on a seeded schedule, recording each in the history.

A ``Fault`` is a name plus two callables, ``inject`` and ``heal``, so it works with any target
and any handle: a process supervisor's kill/start, an engine handle's kill/restart, a
Toxiproxy proxy's disable/enable (``toxiproxy-python`` or anything with the same methods),
an etcd fixture's stop/start. The helpers below build the usual ones.

Each injection and heal is an ``invoke``/``info`` pair of process ``"nemesis"`` in the history
(``f`` = ``inject``/``heal``, key = the fault's subject), and an allure step when allure is
installed (a no-op unless a report directory is set). A fault may ``announce`` the subject's
new incarnation after a heal (e.g. a restarted engine's instance id); the heal's completion
carries it as ``instance``, which ``transfers_reach_new_instance`` reads.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.chaos.checkers import HEAL, INJECT
from pytest_mooncake.chaos.history import NEMESIS, History

Action = Callable[[], Any]
Executor = Callable[[Action], Any]
"""Runs a fault action and returns its result; the runner passes one that runs it on the
test's own thread (see ``runner``)."""


def _direct(action: Action) -> Any:
    return action()


@dataclass(frozen=True)
class Fault:
    """One kind of fault on one subject, with the actions that inject and heal it. ``heal``
    must be safe to call after a partial or failed ``inject``."""

    kind: str
    subject: str
    inject: Action
    heal: Action
    announce: Callable[[], str | None] | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.subject}"


def kill_restart(subject: str, kill: Action, restart: Action,
                 announce: Callable[[], str | None] | None = None) -> Fault:
    """Kill a process (inject) and start it again (heal)."""
    return Fault("kill", subject, kill, restart, announce)


def process_kill(proc: Any, subject: str | None = None) -> Fault:
    """SIGKILL a ``ManagedProcess`` and start it again with the same argv; announces the new
    pid as the instance."""
    return kill_restart(subject or proc.name, proc.kill, lambda: proc.start() and None,
                        announce=lambda: f"pid-{proc.pid}")


def engine_kill(engine: Any, keep_addresses: bool = False,
                announce: Callable[[], str | None] | None = None) -> Fault:
    """Kill an ``EngineHandle``'s process and restart it under the same segment name (a
    replacement). ``announce`` names the new incarnation; default: its pid."""
    return kill_restart(engine.segment, engine.kill,
                        lambda: engine.restart(keep_addresses=keep_addresses),
                        announce=announce or (lambda: f"pid-{engine.pid}"))


def process_pause(proc: Any, subject: str | None = None) -> Fault:
    """SIGSTOP a ``ManagedProcess`` group (inject) and SIGCONT it (heal)."""
    return Fault("pause", subject or proc.name, lambda: proc.send_signal(signal.SIGSTOP),
                 lambda: proc.send_signal(signal.SIGCONT))


def partition(proxy: Any, subject: str | None = None) -> Fault:
    """Cut the traffic through a Toxiproxy proxy (disable: new connections refused, open ones
    closed) and restore it (enable)."""
    return Fault("partition", subject or proxy.name, proxy.disable, proxy.enable)


def latency(proxy: Any, ms: int, jitter: int = 0, stream: str = "downstream",
            subject: str | None = None) -> Fault:
    """Add a Toxiproxy ``latency`` toxic to a proxy, and remove it."""
    name = f"nemesis_latency_{stream}"

    def inject() -> None:
        proxy.add_toxic(name=name, type="latency", stream=stream,
                        attributes={"latency": ms, "jitter": jitter})

    def heal() -> None:
        if any(t == name for t in proxy.toxics()):
            proxy.destroy_toxic(name)

    return Fault("latency", subject or proxy.name, inject, heal)


def etcd_outage(etcd: Any, subject: str = "etcd") -> Fault:
    """Stop the metadata etcd (``mc_etcd.stop``) and start it again."""
    return Fault("etcd-stop", subject, etcd.stop, etcd.start)


# ------------------------------------------------------------------ schedule


@dataclass(frozen=True)
class Step:
    """Wait ``wait`` seconds, inject ``fault``, hold it ``hold`` seconds, heal it."""

    wait: float
    fault: Fault
    hold: float


def allure_steps(title: str) -> ContextManager[Any]:
    """An allure step when allure is installed (recorded only when a report is being made)."""
    try:
        import allure
    except ImportError:
        return contextlib.nullcontext()
    return allure.step(title)


class Nemesis:
    """Runs a seeded schedule of faults, one at a time, until stopped; heals what it injected.

    ``quiet`` and ``hold`` are (min, max) seconds between faults and of each fault. The plan
    (which fault, when, how long) depends only on the seed and the list of faults.
    """

    def __init__(self, faults: Sequence[Fault], seed: int,
                 quiet: tuple[float, float] = (0.5, 2.0), hold: tuple[float, float] = (0.5, 2.0),
                 step: Callable[[str], ContextManager[Any]] = allure_steps):
        if not faults:
            raise ValueError("a nemesis needs at least one fault")
        labels = [f.label for f in faults]
        if len(set(labels)) != len(labels):
            raise ValueError(f"fault labels must be unique (got {labels})")
        for name, (lo, hi) in (("quiet", quiet), ("hold", hold)):
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be (min, max) with 0 <= min <= max (got {lo, hi})")
        self.faults = list(faults)
        self.seed = seed
        self.quiet = quiet
        self.hold = hold
        self._step = step
        self.active: dict[str, Fault] = {}
        self.injected = 0
        self.healed: dict[str, int] = {f.label: 0 for f in faults}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def plan(self) -> Iterator[Step]:
        rng = random.Random(f"{self.seed}/nemesis")
        while True:
            yield Step(rng.uniform(*self.quiet), rng.choice(self.faults), rng.uniform(*self.hold))

    def run(self, history: History, stop: threading.Event, execute: Executor = _direct) -> None:
        """Follow the plan until ``stop`` is set; every fault is healed before returning."""
        for step in self.plan():
            if stop.wait(step.wait):
                return
            self.inject(history, step.fault, execute)
            try:
                stop.wait(step.hold)
            finally:
                self.heal(history, step.fault, execute)
            if stop.is_set():
                return

    def inject(self, history: History, fault: Fault, execute: Executor = _direct) -> None:
        with self._lock:
            self.active[fault.label] = fault
            self.injected += 1
        self._act(history, INJECT, fault, fault.inject, execute)

    def heal(self, history: History, fault: Fault, execute: Executor = _direct) -> bool:
        ok = self._act(history, HEAL, fault, fault.heal, execute, announce=fault.announce)
        if ok:
            with self._lock:
                self.active.pop(fault.label, None)
                self.healed[fault.label] += 1
        return ok

    def healed_each(self) -> int:
        """How many times the least healed fault was healed (each was injected as often)."""
        with self._lock:
            return min(self.healed.values())

    def heal_all(self, history: History) -> list[str]:
        """Heal every fault still active (after a failed heal or an interrupted run); returns
        what could not be healed."""
        for fault in list(self.active.values()):
            self.heal(history, fault)
        return [f"{label} could not be healed" for label in self.active]

    def _act(self, history: History, verb: str, fault: Fault, action: Action,
             execute: Executor, announce: Callable[[], str | None] | None = None) -> bool:
        op = history.invoke(NEMESIS, verb, key=fault.subject, value={"fault": fault.kind})
        with self._step(f"nemesis: {verb} {fault.label}"):
            try:
                result = execute(action)
                instance = execute(announce) if announce is not None else None
            except Exception as exc:  # a failed fault action is recorded, not fatal
                message = f"{verb} {fault.label}: {type(exc).__name__}: {exc}"
                self.errors.append(message)
                history.info(op, error=message, value={"fault": fault.kind})
                return False
        value = {"fault": fault.kind}
        if result is not None:
            value["result"] = result if isinstance(result, str | int | float | bool) else repr(result)
        history.info(op, value=value, instance=instance)
        return True
