"""The labels of a test whose xdist worker died under it, for the controller's matrix.

A test that kills its worker (``os._exit``, SIGKILL, a segfault in a C library) is an error of
every requirement it names. xdist reports it on the controller as a failed report without the
test's user properties ("worker 'gw0' crashed while running ..."), so the matrix would not see
it. Each worker writes the labels of every test it collected into a directory the controller
hands out (``<dir>/<worker>.json``, renamed into place whole); the controller reads them when a
crash is reported and removes the directory at the end of the session.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

Labels = list[tuple[str, str]]
WORKERINPUT_KEY = "mc_labels_dir"


class CrashLabels:
    """The controller's side: the directory, and the labels of a crashed test."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self._seen: dict[str, Labels] = {}

    def directory_for_workers(self) -> str:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="pytest-mooncake-labels-"))
        return str(self.directory)

    def remember(self, nodeid: str, labels: Labels) -> None:
        """Labels seen on an earlier phase report of ``nodeid``."""
        self._seen.setdefault(nodeid, labels)

    def of(self, nodeid: str) -> Labels:
        """The labels of ``nodeid`` (empty when no worker named it)."""
        if nodeid in self._seen:
            return self._seen[nodeid]
        if self.directory is None:
            return []
        for path in sorted(self.directory.glob("*.json")):
            try:
                published = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if nodeid in published:
                return [tuple(pair) for pair in published[nodeid]]  # type: ignore[misc]
        return []

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def publish(directory: str, worker: str, labels: dict[str, Labels]) -> None:
    """The worker's side: write the labels of every collected test."""
    final = Path(directory) / f"{worker}.json"
    tmp = final.with_name(f".{worker}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(labels))
    os.replace(tmp, final)
