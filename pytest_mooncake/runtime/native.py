"""Shared libraries and small programs the plugin builds from C sources it ships, once per
source and flags.

Stand-ins for libraries a machine lacks (a no-device CUDA driver), the emulated verbs library
and the exec wrapper of supervised children are small C files in this package; they are
compiled with the machine's C compiler into the cache directory, keyed by a hash of the
sources, flags and compiler, so a second run (or a second xdist worker) reuses the same file. A build in progress is serialised with a lock
file, and the result is renamed into place only when complete, so a killed build leaves no
half-written library behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_mooncake.runtime.deadlines import Timeout, wait_until

CACHE_ENV = "MC_CACHE_DIR"
COMPILER_HINT = "install a C compiler (apt-get install -y gcc) or set CC"


class NativeBuildError(RuntimeError):
    """A shipped C source could not be compiled; the message says what the compiler said."""


def cache_dir(*parts: str) -> Path:
    """The plugin's cache directory (``$MC_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-mooncake``,
    else ``~/.cache/pytest-mooncake``), created, with ``parts`` joined below it."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "pytest-mooncake")
    path = Path(root).expanduser().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def compiler() -> str:
    """The C compiler to use (``$CC``, else ``cc``/``gcc`` on PATH)."""
    for cand in (os.environ.get("CC"), "cc", "gcc"):
        if cand and shutil.which(cand):
            return cand
    raise NativeBuildError(f"no C compiler found (tried $CC, cc, gcc): {COMPILER_HINT}")


def _compiler_id(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeBuildError(f"{cc} --version failed: {exc}; {COMPILER_HINT}") from None
    return out.stdout.decode(errors="replace").splitlines()[0] if out.stdout else cc


def build_shared_library(
    name: str,
    sources: Sequence[Path],
    *,
    soname: str | None = None,
    version_script: Path | None = None,
    cflags: Sequence[str] = (),
    ldflags: Sequence[str] = (),
    timeout: float = 180.0,
) -> Path:
    """Compile ``sources`` into ``<cache>/native/<hash>/<name>`` and return its path.

    ``name`` is the file name (e.g. ``libcuda.so.1``); ``soname`` the DT_SONAME to record
    (default: ``name``); ``version_script`` a linker version script (symbol versions, as the
    real library has them). Raises ``NativeBuildError`` with the compiler's output on failure.
    """
    soname = soname or name
    link = ["-shared", f"-Wl,-soname,{soname}"]
    if version_script:
        link.append(f"-Wl,--version-script={version_script}")
    extra = [Path(version_script)] if version_script else []
    return _build(name, sources, extra, ["-fPIC", *cflags], [*link, *ldflags], timeout)


def build_executable(name: str, sources: Sequence[Path], *, cflags: Sequence[str] = (),
                     ldflags: Sequence[str] = (), timeout: float = 180.0) -> Path:
    """Compile ``sources`` into the program ``<cache>/native/<hash>/<name>``; its path.
    ``ldflags`` follow the sources (libraries to link). Raises ``NativeBuildError`` with the
    compiler's output on failure."""
    return _build(name, sources, [], [*cflags], [*ldflags], timeout)


def _build(name: str, sources: Sequence[Path], extra_inputs: list[Path], cflags: list[str],
           link: list[str], timeout: float) -> Path:
    cc = compiler()
    digest = hashlib.sha256()
    for part in (name, _compiler_id(cc), *cflags, "|", *link):
        digest.update(part.encode() + b"\0")
    inputs = [Path(s) for s in sources] + extra_inputs
    for src in inputs:
        try:
            digest.update(src.name.encode() + b"\0" + src.read_bytes())
        except OSError as exc:
            raise NativeBuildError(f"cannot read C source {src}: {exc}") from None
    out_dir = cache_dir("native", f"{name}-{digest.hexdigest()[:16]}")
    target = out_dir / name
    if target.is_file():
        return target
    deadline = time.monotonic() + timeout
    with open(out_dir / ".lock", "w") as lock:

        def locked() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            wait_until(locked, timeout, f"the build lock of {target}", interval=0.05,
                       max_interval=0.05)
        except Timeout:
            raise NativeBuildError(
                f"another process held the build lock of {target} for {timeout:.0f} s; "
                f"remove {out_dir} if no build is running") from None
        if target.is_file():  # built by whoever held the lock
            return target
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
        os.close(fd)
        argv = [cc, "-O2", "-Wall", *cflags, "-o", tmp, *(str(s) for s in sources), *link]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=max(1.0, deadline - time.monotonic()),
                                  check=False)
        except subprocess.TimeoutExpired:
            os.unlink(tmp)
            raise NativeBuildError(f"compiling {name} took over {timeout:.0f} s: {' '.join(argv)}") from None
        if done.returncode != 0:
            os.unlink(tmp)
            said = done.stderr.decode(errors="replace").strip()
            raise NativeBuildError(f"compiling {name} failed (exit {done.returncode}): "
                                   f"{' '.join(argv)}\n{said}")
        os.replace(tmp, target)
    return target
