"""Run workers and a nemesis against a system for a bounded time, then heal and read back.

Phases (as Jepsen's): *chaos* (workers invoke generated ops while the nemesis injects faults)
until ``seconds`` pass (counted from when the workers start, not from when their clients were
made) and the nemesis healed each of its faults ``each_fault`` times (waited for up to
``fault_timeout`` more seconds, so a loaded machine cannot end a run before its faults happened), ``max_ops`` ops were
invoked, or every worker's stream ends; *heal* (every fault healed, always, also after an
error); *final* (the ``final`` generator's ops, typically one read per key, each retried until
it succeeds or ``final_timeout`` passes, recorded with ``final=True``). All threads are joined
with deadlines.

A *client* is the only target-specific part: ``client_for(worker)`` returns an object whose
``invoke(spec)`` performs one op and returns its result (recorded ``ok``), or ``ok(...)``,
``fail(...)``, ``info(...)`` to say more. An exception that is the system's answer (an
``OSError`` such as a refused or reset connection, a timeout, an ``EOFError``, or any exception
whose class sets ``system_answer = True``) is recorded ``info`` (indeterminate); any other
(a ``TypeError`` in the client, a ``KeyError``) is a bug of the client, not an answer: that
worker stops and the run ends in ``ChaosRunError`` naming it, so no checker judges a history
the client made up. A client must bound each call itself (socket timeouts, RPC deadlines): a call cannot be
interrupted from outside. It may define ``close()``.

Fault actions run on the caller's thread, not the nemesis thread: the nemesis thread decides
*when*, and hands each action to the runner loop. A child process started by a restart thus
belongs to the long-lived test thread (``PR_SET_PDEATHSIG``, which the process supervisor
sets, fires when the *thread* that forked the child exits).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_mooncake.chaos.checkers import Checker, Verdict, check
from pytest_mooncake.chaos.generator import Generator, OpSpec, Workload
from pytest_mooncake.chaos.history import FAIL, INFO, OK, History, Op
from pytest_mooncake.chaos.nemesis import Fault, Nemesis
from pytest_mooncake.chaos.recovery import RecoveryTimes, recovery_times
from pytest_mooncake.runtime.deadlines import Timeout, wait_until


@dataclass(frozen=True)
class Outcome:
    type: str
    value: Any = None
    error: str | None = None
    instance: str | None = None


def ok(value: Any = None, instance: str | None = None) -> Outcome:
    """The op happened; ``value`` is its result (what a read saw)."""
    return Outcome(OK, value, None, instance)


def fail(error: str, instance: str | None = None) -> Outcome:
    """The op certainly did not happen (e.g. connection refused before sending)."""
    return Outcome(FAIL, None, error, instance)


def info(error: str, instance: str | None = None) -> Outcome:
    """Unknown whether the op happened (timeout, connection lost after sending)."""
    return Outcome(INFO, None, error, instance)


class Client(Protocol):
    def invoke(self, spec: OpSpec) -> Any: ...


class ChaosRunError(RuntimeError):
    """The run could not be finished cleanly (a fault not healed, a thread that would not
    stop). ``result`` holds what was recorded."""

    def __init__(self, message: str, result: ChaosResult):
        super().__init__(message)
        self.result = result


@dataclass
class ChaosResult:
    history: History
    seconds: float
    faults_injected: int
    errors: list[str] = field(default_factory=list)
    seed: int | None = None
    workers: int | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    """Every verdict ``check`` returned, in order (the report shows them)."""
    on_check: list[Callable[[ChaosResult], None]] = field(default_factory=list, repr=False)
    """Called after each ``check`` (``mc_chaos`` redraws the run's report)."""
    report: Any = None
    """The run's ``RunReport`` (timeline and plot paths) when ``mc_chaos`` ran it."""

    @property
    def counts(self) -> dict[str, int]:
        return self.history.counts()

    @property
    def recovery(self) -> RecoveryTimes:
        """Per fault: heal to the first ok operation, per scope (``to_json()`` for reports)."""
        return recovery_times(self.history, self.workers)

    def check(self, *checkers: Checker) -> Verdict:
        verdict = check(self.history, *checkers)
        self.verdicts.append(verdict)
        for listener in self.on_check:
            listener(self)
        return verdict

    def summary(self) -> str:
        c = self.counts
        return (f"{c['invoke']} ops in {self.seconds:.1f}s: {c['ok']} ok, {c['fail']} fail, "
                f"{c['info']} info; {self.faults_injected} fault(s) injected")


class _Budget:
    def __init__(self, limit: int | None):
        self.left = limit
        self.lock = threading.Lock()

    def take(self) -> bool:
        if self.left is None:
            return True
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True


SYSTEM_ANSWERS = (OSError, TimeoutError, EOFError)
"""Exceptions a client call raises because of the system (besides ``system_answer = True``)."""


class ClientBug(Exception):
    """A client raised an exception that is not the system's answer."""


def is_system_answer(exc: BaseException) -> bool:
    return isinstance(exc, SYSTEM_ANSWERS) or bool(getattr(exc, "system_answer", False))


def _call(client: Any, spec: OpSpec) -> Outcome:
    """One op through ``client``: its outcome, ``info`` for the system's exceptions (as Jepsen
    records a crashed client); ``ClientBug`` for any other exception."""
    try:
        result = client.invoke(spec)
    except Exception as exc:
        if not is_system_answer(exc):
            raise ClientBug(f"client {type(client).__name__} raised {type(exc).__name__} on "
                            f"{spec.f} {spec.key!r}: {exc} (a bug of the client, not the "
                            f"system's answer)") from exc
        return info(f"{type(exc).__name__}: {exc}")
    return result if isinstance(result, Outcome) else ok(result)


def _record(history: History, op: Op, out: Outcome) -> None:
    if out.type == OK:
        history.ok(op, out.value, instance=out.instance)
    elif out.type == FAIL:
        history.fail(op, out.error or "failed", instance=out.instance)
    else:
        history.info(op, error=out.error, instance=out.instance)


def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        try:
            close()
        except Exception:
            pass


class _CallerThread:
    """Runs actions submitted from other threads on the thread that calls ``serve``."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.calls: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self.closed = False

    def execute(self, action: Callable[[], Any]) -> Any:
        if threading.get_ident() == self.owner:
            return action()
        future: Future[Any] = Future()
        self.calls.put((action, future))
        if self.closed:
            self.close()
        return future.result()

    def serve(self, timeout: float) -> None:
        try:
            action, future = self.calls.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return
        try:
            future.set_result(action())
        except BaseException as exc:  # handed back to the submitting thread
            future.set_exception(exc)

    def close(self) -> None:
        """Refuse what is still queued (the runner no longer serves)."""
        self.closed = True
        while True:
            try:
                _, future = self.calls.get_nowait()
            except queue.Empty:
                return
            future.set_exception(RuntimeError("the chaos runner stopped serving fault actions"))


def run_chaos(
    client_for: Callable[[int], Any],
    workload: Workload,
    *,
    seconds: float,
    workers: int = 3,
    max_ops: int | None = None,
    nemesis: Nemesis | None = None,
    final: Generator | None = None,
    final_timeout: float = 10.0,
    join_timeout: float = 10.0,
    history: History | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 1.0,
    recovery: float = 0.0,
    each_fault: int = 0,
    fault_timeout: float = 60.0,
) -> ChaosResult:
    """Run the chaos, heal and final phases; see the module docstring. ``recovery`` seconds of
    workload run after every fault is healed (no nemesis), so that recovery from the last
    fault can be judged too."""
    if seconds <= 0 or workers <= 0:
        raise ValueError(f"seconds and workers must be positive (got {seconds}, {workers})")
    history = history if history is not None else History()
    stop = threading.Event()
    budget = _Budget(max_ops)
    clients: list[Any] = []
    errors: list[str] = []
    t0 = time.monotonic()  # again when the workers start

    def work(worker: int, client: Any, stop: threading.Event = stop, stream: int | None = None
             ) -> None:
        process = worker
        for spec in workload.for_worker(worker if stream is None else stream):
            if stop.is_set() or (spec.delay and stop.wait(spec.delay)) or not budget.take():
                return
            op = history.invoke(process, spec.f, spec.key, spec.value)
            try:
                out = _call(client, spec)
            except ClientBug as bug:
                history.info(op, error=str(bug))
                errors.append(str(bug))
                return
            _record(history, op, out)
            if out.type == INFO:
                process += workers  # a crashed process is retired, as in Jepsen

    threads = []
    nemesis_thread = None
    caller = _CallerThread()
    try:
        for w in range(workers):
            clients.append(client_for(w))
            threads.append(threading.Thread(target=work, args=(w, clients[-1]),
                                            name=f"mc-chaos-worker-{w}", daemon=True))
        if nemesis is not None:
            nemesis_thread = threading.Thread(target=nemesis.run,
                                              args=(history, stop, caller.execute),
                                              name="mc-chaos-nemesis", daemon=True)
        t0 = time.monotonic()
        for t in threads + ([nemesis_thread] if nemesis_thread else []):
            t.start()
        deadline = t0 + seconds
        faults_deadline = deadline + fault_timeout
        next_report = t0 + progress_every
        while True:
            alive = [t for t in threads if t.is_alive()]
            now = time.monotonic()
            if not alive or now >= faults_deadline:
                break
            if now >= deadline and (nemesis is None or nemesis.healed_each() >= each_fault):
                break
            if progress is not None and now >= next_report:
                progress(_progress_line(history, now - t0, seconds, nemesis))
                next_report += progress_every
            caller.serve(timeout=min(0.05, deadline - now) if now < deadline else 0.05)
    finally:
        stop.set()
        join_deadline = time.monotonic() + join_timeout
        while nemesis_thread is not None and nemesis_thread.is_alive() \
                and time.monotonic() < join_deadline:
            caller.serve(timeout=0.02)
        caller.close()
        for t in threads + ([nemesis_thread] if nemesis_thread else []):
            if t.ident is None:
                continue  # never started (a client_for call failed)
            t.join(timeout=max(0.0, join_deadline - time.monotonic()))
            if t.is_alive():
                errors.append(f"{t.name} did not stop within {join_timeout}s "
                              f"(a client call without a timeout?)")
        if nemesis is not None:
            errors.extend(nemesis.heal_all(history))
    if recovery > 0 and not errors:
        _recovery_phase(work, clients[:workers], workers, recovery, join_timeout, errors)
    chaos_seconds = time.monotonic() - t0
    try:
        if final is not None:
            client = client_for(workers)
            clients.append(client)
            _final_phase(history, client, Workload(final, workload.seed),
                         process=workers * 1000, timeout=final_timeout, errors=errors)
    finally:
        for c in clients:
            _close(c)
    result = ChaosResult(history, chaos_seconds, nemesis.injected if nemesis else 0, errors,
                         workload.seed, workers)
    if progress is not None:
        progress("chaos done: " + result.summary())
    if errors:
        raise ChaosRunError("; ".join(errors), result)
    return result


def _recovery_phase(work: Callable[..., None], clients: list[Any], workers: int, seconds: float,
                    join_timeout: float, errors: list[str]) -> None:
    """The workload again, on fresh streams and process ids, with every fault healed."""
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(workers + w, client, stop, workers + w),
                                name=f"mc-chaos-recovery-{w}", daemon=True)
               for w, client in enumerate(clients)]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    deadline = time.monotonic() + join_timeout
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            errors.append(f"{t.name} did not stop within {join_timeout}s")


def _final_phase(history: History, client: Any, workload: Workload, process: int,
                 timeout: float, errors: list[str]) -> None:
    """Each final op retried until it succeeds, all of them within one ``timeout``."""
    deadline = time.monotonic() + timeout
    for spec in workload.for_worker(0):
        last: list[Outcome] = []

        def attempt(spec: OpSpec = spec, last: list[Outcome] = last) -> bool:
            nonlocal process
            op = history.invoke(process, spec.f, spec.key, spec.value, final=True)
            try:
                out = _call(client, spec)
            except ClientBug as bug:
                history.info(op, error=str(bug))
                raise
            _record(history, op, out)
            last[:] = [out]
            if out.type == INFO:
                process += 1
            return out.type == OK

        try:
            wait_until(attempt, max(0.0, deadline - time.monotonic()),
                       f"final {spec.f} {spec.key}", interval=0.01, max_interval=0.2)
        except Timeout:
            errors.append(f"final {spec.f} {spec.key} did not succeed within {timeout}s "
                          f"(last: {last[0].error})")
            return
        except ClientBug as bug:
            errors.append(str(bug))
            return


def _progress_line(history: History, elapsed: float, seconds: float,
                   nemesis: Nemesis | None) -> str:
    c = history.counts()
    faults = ""
    if nemesis is not None:
        active = ", ".join(nemesis.active) or "none"
        faults = f" | faults {nemesis.injected} (active: {active})"
    return (f"chaos {elapsed:5.1f}/{seconds:g}s | ops {c['invoke']} ok {c['ok']} "
            f"fail {c['fail']} info {c['info']}{faults}")


def faults_nemesis(faults: Sequence[Fault], seed: int, **options: Any) -> Nemesis | None:
    """A ``Nemesis`` over ``faults``, or None when there are none."""
    return Nemesis(faults, seed, **options) if faults else None
