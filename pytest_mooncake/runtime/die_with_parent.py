"""Children that die with the test process, started with no Python code between fork and exec.

A child has to ask for ``PR_SET_PDEATHSIG`` itself. Asking in ``preexec_fn`` runs Python in the
forked child, which is unsafe when the parent has threads (a lock another thread held at the
fork stays held forever in the child; CPython documents it) and rules out vfork. Instead every
child starts through a tiny exec wrapper (``die_with_parent.c``: prctl, check that the parent
is still the process that forked it, exec), compiled once per machine into the plugin's cache.
Without a C compiler the same three steps run in a Python wrapper, which costs an interpreter
start per child (about 0.05 s on a quiet machine, 0.4 s on a loaded one).

The signal fires when the *thread* that forked the child ends; the process supervisor forks
from one long-lived thread for that reason.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_mooncake.runtime.native import NativeBuildError, build_executable

SOURCE = Path(__file__).with_name("die_with_parent.c")
PARENT_GONE = 70
"""The wrapper's exit status when its parent died before the request took effect."""

PYTHON_WRAPPER = (
    "import ctypes, os, signal, sys\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:\n"  # PDEATHSIG
    "    sys.exit('prctl(PR_SET_PDEATHSIG) failed')\n"
    f"if os.getppid() != int(sys.argv[1]): os._exit({PARENT_GONE})\n"
    "os.execv(sys.argv[2], sys.argv[3:])\n"
)


def die_with(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when ``parent`` (the process that started it)
    ends, and end now if it already has. For a process started by someone else's code (an xdist
    worker, started by execnet); safe here, since no fork is involved."""
    import ctypes  # noqa: PLC0415 (only where used)
    import signal  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(PARENT_GONE)


@functools.cache
def wrapper_argv() -> tuple[str, ...]:
    """The compiled wrapper, or the Python one where nothing can compile it."""
    try:
        return (str(build_executable("mc-die-with-parent", [SOURCE])),)
    except NativeBuildError:
        return python_wrapper_argv()


def python_wrapper_argv() -> tuple[str, ...]:
    return (sys.executable, "-I", "-S", "-c", PYTHON_WRAPPER)


def resolve_program(program: str, env: Mapping[str, str] | None) -> str:
    """The file ``program`` names, looked up on ``env``'s PATH as ``subprocess.Popen`` would,
    so a missing program is a ``FileNotFoundError`` in the parent, not an exit status."""
    if os.sep in program:
        return program
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    found = shutil.which(program, path=path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, f"{program!r} not found on PATH={path}", program)
    return found


def wrap(argv: Sequence[str], env: Mapping[str, str] | None = None,
         wrapper: Sequence[str] | None = None) -> list[str]:
    """``argv`` run through the wrapper, so the child dies with this process."""
    argv = [str(a) for a in argv]
    front = wrapper_argv() if wrapper is None else tuple(wrapper)
    return [*front, str(os.getpid()), resolve_program(argv[0], env), *argv]
