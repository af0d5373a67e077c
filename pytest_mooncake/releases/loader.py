"""The dynamic loader's view: which shared libraries this machine really provides.

A library counts as present when ``dlopen`` of its soname succeeds in a fresh process with the
caller's ``LD_LIBRARY_PATH`` less the plugin's own cache directories (so a stand-in put there
by an outer run is never mistaken for the real thing). ``ldd`` tells what a given file still
cannot resolve under a given environment.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_mooncake.runtime.native import cache_dir

_DLOPEN = r"""
import ctypes, json, sys
class LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]
libc = ctypes.CDLL(None)
found = {}
for name in sys.argv[1:]:
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        found[name] = None
        continue
    lm = ctypes.POINTER(LinkMap)()
    if libc.dlinfo(ctypes.c_void_p(lib._handle), 2, ctypes.byref(lm)) == 0 and lm:
        found[name] = (lm.contents.l_name or b"").decode() or name
    else:
        found[name] = name
print(json.dumps(found))
"""


def own_dirs() -> list[Path]:
    """Directories the plugin puts libraries in (stand-ins, release environments)."""
    return [cache_dir("native"), cache_dir("releases")]


def without_own_dirs(ld_library_path: str) -> str:
    """``ld_library_path`` less entries inside the plugin's cache directories."""
    mine = [str(p.resolve()) for p in own_dirs()]
    keep = [entry for entry in ld_library_path.split(os.pathsep) if entry and not any(
        os.path.realpath(entry).startswith(m) for m in mine)]
    return os.pathsep.join(keep)


@functools.lru_cache(maxsize=64)
def _dlopen(sonames: tuple[str, ...], ld_library_path: str) -> Mapping[str, str | None]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    try:
        out = subprocess.run([sys.executable, "-c", _DLOPEN, *sonames], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return dict.fromkeys(sonames)


def system_libraries(sonames: Iterable[str], ld_library_path: str | None = None
                     ) -> Mapping[str, str | None]:
    """``{soname: path the loader picked, or None}`` for the machine's own libraries."""
    raw = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    return _dlopen(tuple(sorted(set(sonames))), without_own_dirs(raw))


def unresolved(path: Path, env: Mapping[str, str]) -> list[str]:
    """Sonames ``ldd`` reports as "not found" for ``path`` under ``env``."""
    try:
        out = subprocess.run(["ldd", str(path)], env=dict(env), capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"(ldd failed: {exc})"]
    return sorted({line.split("=>")[0].strip() for line in out.stdout.splitlines()
                   if "not found" in line})
