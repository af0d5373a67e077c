"""A run's results as they come, one JSON line per judged mutant, so a long run (the whole
mechanical catalogue takes hours) survives a stopped session and goes on where it stopped.

The first line says what judged the mutants (seed, ``--suites-only``, deadline): a resumed run
must judge the rest the same way, else its kill rate mixes two experiments. Each later line is a
``Result`` with the commit of the tree it was judged on. A line cut short by a killed writer is
dropped (its mutant is judged again); so are ERROR results (not a judgement).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import IO, Any

from mutation.runner import ERROR, Result

FORMAT = 1
SETTINGS = ("seed", "suites_only", "deadline")


class JournalError(ValueError):
    """The journal cannot be resumed by this run; the message says what differs."""


def tree_commit(root: Path) -> str:
    """HEAD of ``root`` (``+dirty`` when its tracked files differ), or "" outside git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 1 else "")


class Journal:
    """Append-only record of one run; ``done`` holds what earlier sittings judged."""

    def __init__(self, path: Path, settings: dict[str, Any], commit: str):
        self.path = path
        self.commit = commit
        self.settings = dict(settings)
        self.done: dict[str, Result] = {}
        self.commits: dict[str, str] = {}
        self.dropped = 0
        self._out: IO[str] | None = None
        if path.exists() and path.stat().st_size:
            self._read()

    @staticmethod
    def stored_settings(path: Path) -> dict[str, Any] | None:
        """The settings line of an existing journal (None when there is none yet)."""
        if not path.exists() or not path.stat().st_size:
            return None
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        try:
            head = json.loads(first)
        except ValueError:
            raise JournalError(f"{path}: its first line is not JSON; not a mutants journal "
                               f"(remove it or name another --journal)") from None
        if not isinstance(head, dict) or head.get("journal") != FORMAT:
            raise JournalError(f"{path}: not a mutants journal of format {FORMAT} "
                               f"(first line {first.strip()[:80]!r})")
        return {k: head.get(k) for k in SETTINGS}

    def _read(self) -> None:
        stored = self.stored_settings(self.path) or {}
        differ = [f"{k}: journal {stored.get(k)!r}, this run {self.settings[k]!r}"
                  for k in SETTINGS if stored.get(k) != self.settings[k]]
        if differ:
            raise JournalError(f"{self.path} was judged with other settings ({'; '.join(differ)}); "
                               f"resume with the journal's settings or name another --journal")
        names = {f.name for f in fields(Result)}
        with self.path.open(encoding="utf-8") as f:
            next(f)
            for line in f:
                try:
                    raw = json.loads(line)
                    result = Result(**{k: v for k, v in raw.items() if k in names})
                except (ValueError, TypeError):
                    self.dropped += 1  # cut short by a killed writer: judged again
                    continue
                if result.status == ERROR:
                    self.dropped += 1
                    continue
                self.done[result.id] = result
                self.commits[result.id] = raw.get("commit", "")

    def open(self) -> None:
        """Start appending (writes the settings line of a new journal)."""
        fresh = not self.path.exists() or not self.path.stat().st_size
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not fresh:
            with self.path.open("rb+") as f:  # a cut last line: end it, so appends start clean
                f.seek(-1, 2)
                if f.read(1) != b"\n":
                    f.write(b"\n")
        self._out = self.path.open("a", encoding="utf-8")
        if fresh:
            self._write({"journal": FORMAT, **self.settings, "started_utc": _utc()})

    def record(self, result: Result) -> None:
        if self._out is None:
            raise RuntimeError("Journal.record before open()")
        self._write({**asdict(result), "commit": self.commit, "judged_utc": _utc()})

    def _write(self, doc: dict[str, Any]) -> None:
        assert self._out is not None
        self._out.write(json.dumps(doc) + "\n")
        self._out.flush()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
