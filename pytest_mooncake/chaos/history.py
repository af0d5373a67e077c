"""An operation history in Jepsen's shape: invoke, then ok / fail / info, per process.

Each worker is one logically single-threaded *process*: it records ``invoke`` before calling
the system and exactly one completion after. ``ok`` means the operation happened, ``fail`` that
it certainly did not, ``info`` that we cannot know (a timeout, a crash mid-call): an ``info``
operation may take effect at any time after its invoke, or never. As in Jepsen, a process
whose operation ended in ``info`` is retired and its worker continues under a new process id.

Times are monotonic nanoseconds since the history began. ``to_jsonl`` writes one JSON object a
line with Jepsen's field names (``index type f process time value``) plus ``key``, ``error``,
``instance`` and ``final`` when set, so elle-cli style tools and people can read it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = (INVOKE, OK, FAIL, INFO)
NEMESIS = "nemesis"
"""The process id of fault injections, as in Jepsen."""


@dataclass(frozen=True)
class Op:
    """One history event. ``value`` of an invoke is the argument (what a put writes); of a
    completion the result (what a get read)."""

    index: int
    type: str
    f: str
    process: int | str
    time: int
    key: Any = None
    value: Any = None
    error: str | None = None
    instance: str | None = None
    """Which incarnation of the server answered (e.g. a restarted engine's new instance id)."""
    final: bool = False
    """Part of the final, post-heal phase (final reads)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "type": self.type, "f": self.f,
                               "process": self.process, "time": self.time, "value": self.value}
        for name in ("key", "error", "instance"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.final:
            out["final"] = True
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str = "op") -> Op:
        missing = [k for k in ("index", "type", "f", "process", "time") if k not in doc]
        if missing:
            raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
        if doc["type"] not in TYPES:
            raise ValueError(f"{where}: field 'type' must be one of {TYPES} (got {doc['type']!r})")
        return cls(index=int(doc["index"]), type=doc["type"], f=str(doc["f"]),
                   process=doc["process"], time=int(doc["time"]), key=doc.get("key"),
                   value=doc.get("value"), error=doc.get("error"),
                   instance=doc.get("instance"), final=bool(doc.get("final", False)))

    def describe(self) -> str:
        """A short human form: ``#12 ok put k3='w0-5' p1 @1.234s``."""
        key = f" {self.key}" if self.key is not None else ""
        val = f"={self.value!r}" if self.value is not None else ""
        extra = f" ({self.error})" if self.error else ""
        inst = f" on {self.instance}" if self.instance else ""
        return (f"#{self.index} {self.type} {self.f}{key}{val} p{self.process} "
                f"@{self.time / 1e9:.3f}s{inst}{extra}")


@dataclass(frozen=True)
class Call:
    """An invoke and its completion (None while pending or after a crash): one operation."""

    invoke: Op
    completion: Op | None

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def key(self) -> Any:
        return self.invoke.key

    @property
    def type(self) -> str:
        return self.completion.type if self.completion is not None else INFO

    @property
    def ok(self) -> bool:
        return self.type == OK

    @property
    def failed(self) -> bool:
        """Certainly did not happen."""
        return self.type == FAIL

    @property
    def start(self) -> int:
        return self.invoke.time

    @property
    def end(self) -> float:
        """When the call certainly had taken effect, if it did: +inf when indeterminate."""
        if self.completion is None or self.completion.type == INFO:
            return math.inf
        return self.completion.time

    @property
    def argument(self) -> Any:
        return self.invoke.value

    @property
    def result(self) -> Any:
        return self.completion.value if self.completion is not None else None

    @property
    def instance(self) -> str | None:
        return self.completion.instance if self.completion is not None else None

    @property
    def final(self) -> bool:
        return self.invoke.final

    @property
    def ops(self) -> list[Op]:
        return [self.invoke] + ([self.completion] if self.completion is not None else [])

    def describe(self) -> str:
        done = self.completion.describe() if self.completion else "(no completion)"
        return f"{self.invoke.describe()} -> {done}"


class History:
    """A thread-safe, append-only history. Workers call ``invoke`` and then one of ``ok``,
    ``fail``, ``info`` with the op ``invoke`` returned."""

    def __init__(self, ops: Iterable[Op] = (), clock: Callable[[], int] = time.monotonic_ns):
        self._ops: list[Op] = list(ops)
        self._lock = threading.Lock()
        self._clock = clock
        self._t0 = clock()
        self._pending: dict[int | str, Op] = {}

    def _append(self, **fields: Any) -> Op:
        with self._lock:
            op = Op(index=len(self._ops), time=self._clock() - self._t0, **fields)
            self._ops.append(op)
            return op

    def invoke(self, process: int | str, f: str, key: Any = None, value: Any = None,
               final: bool = False) -> Op:
        op = self._append(type=INVOKE, f=f, process=process, key=key, value=value, final=final)
        with self._lock:
            if process in self._pending:
                raise RuntimeError(f"process {process} invoked {f} while "
                                   f"{self._pending[process].describe()} is pending")
            self._pending[process] = op
        return op

    def _complete(self, type_: str, invoke: Op, value: Any, error: str | None,
                  instance: str | None) -> Op:
        with self._lock:
            if self._pending.get(invoke.process) is not invoke:
                raise RuntimeError(f"{invoke.describe()} is not the pending op of its process")
            del self._pending[invoke.process]
        return self._append(type=type_, f=invoke.f, process=invoke.process, key=invoke.key,
                            value=value, error=error, instance=instance, final=invoke.final)

    def ok(self, invoke: Op, value: Any = None, instance: str | None = None) -> Op:
        return self._complete(OK, invoke, value, None, instance)

    def fail(self, invoke: Op, error: str, instance: str | None = None) -> Op:
        return self._complete(FAIL, invoke, None, error, instance)

    def info(self, invoke: Op, error: str | None = None, value: Any = None,
             instance: str | None = None) -> Op:
        return self._complete(INFO, invoke, value, error, instance)

    # ------------------------------------------------------------------ reading

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def calls(self) -> list[Call]:
        """Pair each invoke with the next op of the same process (its completion)."""
        return pair(self.ops)

    def counts(self) -> dict[str, int]:
        out = {t: 0 for t in TYPES}
        for op in self.ops:
            out[op.type] += 1
        return out

    def to_jsonl(self, path: str | Path | None = None) -> str:
        text = "".join(json.dumps(op.to_json(), default=str) + "\n" for op in self.ops)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_jsonl(cls, source: str | Path) -> History:
        """Read a history written by ``to_jsonl`` (a path, or the text itself)."""
        if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                         and Path(source).exists()):
            name, text = str(source), Path(source).read_text()
        else:
            name, text = "history", str(source)
        ops = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{name}:{n}: not JSON ({exc})") from None
            if not isinstance(doc, dict):
                raise ValueError(f"{name}:{n}: expected a JSON object")
            ops.append(Op.from_json(doc, where=f"{name}:{n}"))
        return cls(ops)

    def to_porcupine(self) -> list[dict[str, Any]]:
        """The calls as porcupine's ``Operation`` fields (ClientId, Input, Call, Output,
        Return); an indeterminate call returns at +inf, as etcd's robustness tests do."""
        out = []
        for call in self.calls():
            if call.failed:
                continue
            ret = call.end
            out.append({
                "ClientId": call.invoke.process, "Input": {"f": call.f, "key": call.key,
                                                           "value": call.argument},
                "Call": call.start, "Output": call.result,
                "Return": None if math.isinf(ret) else ret,
            })
        return out


def pair(ops: Iterable[Op]) -> list[Call]:
    pending: dict[int | str, Op] = {}
    calls: dict[int, Call] = {}
    order: list[int] = []
    for op in ops:
        if op.type == INVOKE:
            pending[op.process] = op
            calls[op.index] = Call(op, None)
            order.append(op.index)
        else:
            inv = pending.pop(op.process, None)
            if inv is not None:
                calls[inv.index] = replace(calls[inv.index], completion=op)
    return [calls[i] for i in order]
