"""The emulated libibverbs.so.1, compiled from ``csrc/`` by ``runtime.native`` once per content,
with a stub libmlx5.so.1 (``csrc/mlx5/``) in the same directory.

The C sources include rdma-core's ``<infiniband/verbs.h>`` (Debian ``libibverbs-dev``), so the
structures an application compiled against rdma-core hands in are laid out exactly as it
expects; the version script gives every symbol the version rdma-core gives it.

Releases that link libmlx5 (0.3.14 on) would otherwise get the machine's, which needs private
symbols of the real libibverbs and fails to load; the stub answers every mlx5dv_* call with
"not supported", as rdma-core does for a device its mlx5 provider does not drive. It is found
through the ``LD_LIBRARY_PATH`` entry the fabric already gives (the library's directory).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from pytest_mooncake.runtime.native import NativeBuildError, build_shared_library

CSRC = Path(__file__).with_name("csrc")
SONAME = "libibverbs.so.1"
MLX5_SONAME = "libmlx5.so.1"
MLX5_CSRC = CSRC / "mlx5"
HEADERS_HINT = ("rdma-core's headers are missing: install them with "
                "`apt-get install -y libibverbs-dev` (scripts/setup.sh does this as root)")
SYSTEM_HEADER = Path("/usr/include/infiniband/verbs.h")


class VerbsBuildError(NativeBuildError):
    """The emulated library could not be built; the message says what to install or fix."""


def _digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()[:16]


def _headers_digest() -> str:
    """Our own headers and rdma-core's verbs.h are not compiler inputs runtime.native hashes; a
    change to either must still give a new library, so their digest goes into the flags."""
    return _digest(sorted(CSRC.glob("*.h")) + [SYSTEM_HEADER])


def _mlx5_digest() -> str:
    """The stub's inputs (its sources, version script and rdma-core's mlx5dv.h): they go into
    the flags of both libraries, so each directory of the emulated library holds the one stub
    built with it and a changed stub never replaces the one another checkout's runs load."""
    return _digest(sorted(MLX5_CSRC.iterdir()) + [SYSTEM_HEADER.with_name("mlx5dv.h")])


def library_path() -> Path:
    """Build (or find in the cache) the emulated library, with the libmlx5 stub beside it, and
    return the library's path."""
    stub = _mlx5_digest()
    try:
        verbs = build_shared_library(
            SONAME, sorted(CSRC.glob("*.c")), version_script=CSRC / "libibverbs.map",
            cflags=["-fvisibility=hidden", "-pthread", f"-I{CSRC}",
                    f"-DMC_VERBS_HEADERS=0x{_headers_digest()}", f"-DMC_MLX5_STUB=0x{stub}"],
            ldflags=["-ldl", "-pthread"])
        mlx5 = build_shared_library(
            MLX5_SONAME, sorted(MLX5_CSRC.glob("*.c")), version_script=MLX5_CSRC / "libmlx5.map",
            cflags=["-fvisibility=hidden", f"-DMC_MLX5_STUB=0x{stub}"])
    except NativeBuildError as exc:
        if re.search(r"infiniband/\w+\.h", str(exc)):
            raise VerbsBuildError(f"{HEADERS_HINT}\n{exc}") from None
        raise VerbsBuildError(str(exc)) from None
    _place_beside(verbs.parent, mlx5)
    return verbs


def mlx5_path() -> Path:
    """The libmlx5 stub in the emulated library's directory (built with it)."""
    return library_path().parent / MLX5_SONAME


def _place_beside(directory: Path, library: Path) -> None:
    """A symlink ``directory/<library's name>`` to ``library``, made under a temporary name
    and renamed into place, so processes (and xdist workers) racing here never see a partial
    one; one naming another file (a cache cleaned by hand) is replaced the same way."""
    link = directory / library.name
    if link.is_symlink() and os.readlink(link) == str(library):
        return
    tmp = directory / f".{library.name}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(library, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise VerbsBuildError(f"cannot put {library.name} beside the emulated library in "
                              f"{directory}: {exc}") from None
