"""The fault ledger: an append-only JSON-lines file of every fault a run applies to a cluster.

A fault is written (``applying``) and flushed to disk *before* it is applied, then marked
``applied``, and ``healed`` once undone. Whatever a killed run left behind is therefore in the
file: ``python -m pytest_mooncake.cluster heal FILE`` undoes every entry whose last state is not
``healed``. Entries hold a structured description of the fault (never a shell command), from
which the undo is rebuilt, so the file cannot be used to make a heal run arbitrary commands.
Appends are serialised with ``flock`` so xdist workers can share one cluster file.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATES = ("applying", "applied", "healed", "heal_failed")


@dataclass
class Entry:
    """The folded history of one fault."""

    id: str
    run: str
    fault: dict[str, Any]
    state: str
    t: float
    note: str = ""
    history: list[str] = field(default_factory=list)

    @property
    def outstanding(self) -> bool:
        return self.state != "healed"


def new_run_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


class LedgerError(RuntimeError):
    """The ledger file cannot be read or written; the message names it."""


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @contextmanager
    def _locked(self, mode: str) -> Iterator[Any]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, mode, encoding="utf-8")
        except OSError as exc:
            raise LedgerError(f"fault ledger {self.path}: {exc.strerror or exc} (set "
                              f"[faults].ledger to a writable path)") from None
        with f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield f
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._locked("a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def begin(self, run: str, fault: dict[str, Any]) -> str:
        """Record a fault about to be applied; returns its id (durable when this returns)."""
        fault_id = "f" + secrets.token_hex(4)
        self._append({"id": fault_id, "run": run, "state": "applying", "t": time.time(),
                      "fault": fault})
        return fault_id

    def mark(self, fault_id: str, state: str, note: str = "", **update: Any) -> None:
        if state not in STATES:
            raise ValueError(f"unknown ledger state {state!r}")
        record: dict[str, Any] = {"id": fault_id, "state": state, "t": time.time()}
        if note:
            record["note"] = note
        if update:
            record["update"] = update
        self._append(record)

    def entries(self) -> list[Entry]:
        """Every fault, folded to its last state, in the order first recorded."""
        if not self.path.exists():
            return []
        with self._locked("r") as f:
            lines = f.read().splitlines()
        out: dict[str, Entry] = {}
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                fid, state = rec["id"], rec["state"]
            except (ValueError, KeyError, TypeError):
                # a torn last line from a killed writer is expected; anything else is reported
                if number == len(lines):
                    continue
                raise LedgerError(f"{self.path}:{number}: not a ledger record: "
                                  f"{line[:120]!r}") from None
            if "fault" in rec:
                out[fid] = Entry(fid, rec.get("run", "?"), dict(rec["fault"]), state,
                                 rec.get("t", 0.0), history=[state])
            elif fid in out:
                entry = out[fid]
                entry.state = state
                entry.note = rec.get("note", entry.note)
                entry.fault.update(rec.get("update", {}))
                entry.history.append(state)
        return list(out.values())

    def outstanding(self, run: str | None = None) -> list[Entry]:
        """Faults not healed (of one run, or of every run)."""
        return [e for e in self.entries() if e.outstanding and (run is None or e.run == run)]
