"""Running pip for a release environment, and saying exactly what failed when it does."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence

from pytest_mooncake.runtime.die_with_parent import wrap

UNREACHABLE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Network is unreachable|"
    r"Temporary failure in name resolution|Name or service not known|ConnectTimeout|"
    r"Connection refused|ProxyError|Read timed out|No route to host|ConnectionResetError", re.I)
NO_DISTRIBUTION = re.compile(r"No matching distribution found for (\S+)", re.I)


class ReleaseFetchError(RuntimeError):
    """pip could not install what a release environment needs.

    ``command`` is the exact pip command (to run by hand), ``unreachable`` whether pip could not
    reach its index at all (as opposed to the index not having the release)."""

    def __init__(self, message: str, command: str, output: str, unreachable: bool):
        super().__init__(message)
        self.command = command
        self.output = output
        self.unreachable = unreachable


@functools.cache
def outer_pip() -> bool:
    """Whether this interpreter's pip can install into another one (``pip --python``, pip 22.3+):
    then environments need no pip of their own, which saves seconds per environment."""
    try:
        from pip import __version__
    except ImportError:
        return False
    parts = tuple(int(p) for p in re.findall(r"\d+", __version__)[:2])
    return parts >= (22, 3)


def pip_argv(python: str) -> list[str]:
    """How to run pip for the interpreter ``python``."""
    return [sys.executable, "-m", "pip", "--python", python] if outer_pip() else [python, "-m", "pip"]


def pip_install(python: str, requirements: Sequence[str], *, env: Mapping[str, str] | None = None,
                timeout: float = 1800.0, what: str = "") -> str:
    """``pip install REQUIREMENTS`` into the interpreter ``python``; pip's output, or
    ``ReleaseFetchError``."""
    argv = [*pip_argv(python), "install", "--disable-pip-version-check", "--no-input",
            *requirements]
    command = shlex.join(argv)
    try:
        done = subprocess.run(wrap(argv, env), capture_output=True, text=True, timeout=timeout,
                              check=False, env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        raise ReleaseFetchError(f"cannot install {what or ' '.join(requirements)}: `{command}` "
                                f"took over {timeout:.0f} s", command, "", True) from None
    output = (done.stdout or "") + (done.stderr or "")
    if done.returncode == 0:
        return output
    unreachable = bool(UNREACHABLE.search(output))
    lines = [ln for ln in output.splitlines() if ln.startswith("ERROR") or UNREACHABLE.search(ln)]
    said = " | ".join(dict.fromkeys(ln.strip() for ln in lines[-4:])) or output.strip()[-400:]
    why = ("pip cannot reach its package index (offline?)" if unreachable else
           "the package index has no such release" if NO_DISTRIBUTION.search(output) else
           f"pip exited with {done.returncode}")
    raise ReleaseFetchError(f"cannot install {what or ' '.join(requirements)}: {why}. pip said: "
                            f"{said}. Command: `{command}`", command, output, unreachable)
