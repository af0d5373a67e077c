"""Directories a killed run could not remove, found and removed by the next run.

A large directory (an etcd data directory: 64 MB of preallocated write-ahead log) is removed by
its owner when it closes; a run killed with SIGKILL, or a worker killed during its teardown,
cannot. So the owner holds an exclusive ``flock`` on ``<dir>.owner`` for as long as it uses the
directory: the lock dies with its process, and ``sweep`` (called at session start) removes every
such directory whose lock nobody holds. A lock held means someone (another run of this user,
on this machine) still uses it: left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import getpass
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

SUFFIX = ".owner"


class OwnedDir:
    """``path`` claimed by this process until ``release`` (which removes it)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + SUFFIX)
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, self.lock_path):
                break
            os.close(fd)  # a sweep removed the file between our open and our lock: again
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the directory, then the lock file (the lock is held until both are gone)."""
        if self._fd is None:
            return
        try:
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()
        finally:
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def pytest_temp_root() -> Path:
    """Where pytest puts this user's base temp dirs (``$TMPDIR/pytest-of-USER``, or below
    ``PYTEST_DEBUG_TEMPROOT`` as pytest itself reads it)."""
    try:
        user = getpass.getuser()
    except (ImportError, KeyError, OSError):
        user = "unknown"
    root = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    return Path(root) / f"pytest-of-{user}"


def sweep(lock_files: Iterable[Path]) -> list[Path]:
    """Remove the directory of every lock file given that no live process holds; those removed."""
    removed = []
    for lock_path in lock_files:
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            directory = lock_path.with_name(lock_path.name.removesuffix(SUFFIX))
            shutil.rmtree(directory, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                lock_path.unlink()
            removed.append(directory)
        finally:
            os.close(fd)
    return removed


def _matching(directory: Path, parts: list[str]) -> Iterator[Path]:
    """Paths below ``directory`` matching ``parts`` (one glob per level). Not ``Path.glob``:
    other runs remove their temp dirs while we look, and a directory gone between listing and
    entering it is simply not there (``glob`` raises FileNotFoundError on Python 3.11)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in fnmatch.filter(names, parts[0]):
        if len(parts) == 1:
            yield directory / name
        else:
            yield from _matching(directory / name, parts[1:])


def sweep_pytest_temp(patterns: Iterable[str]) -> list[Path]:
    """``sweep`` the lock files matching ``patterns`` (globs below ``pytest_temp_root``)."""
    root = pytest_temp_root()
    return sweep(p for pattern in patterns
                 for p in _matching(root, (pattern + SUFFIX).split("/")))
