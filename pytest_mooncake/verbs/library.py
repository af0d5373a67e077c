"""The emulated libibverbs.so.1, compiled from ``csrc/`` by ``runtime.native`` once per content.

The C sources include rdma-core's ``<infiniband/verbs.h>`` (Debian ``libibverbs-dev``), so the
structures an application compiled against rdma-core hands in are laid out exactly as it
expects; the version script gives every symbol the version rdma-core gives it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytest_mooncake.runtime.native import NativeBuildError, build_shared_library

CSRC = Path(__file__).with_name("csrc")
SONAME = "libibverbs.so.1"
HEADERS_HINT = ("rdma-core's headers are missing: install them with "
                "`apt-get install -y libibverbs-dev` (scripts/setup.sh does this as root)")
SYSTEM_HEADER = Path("/usr/include/infiniband/verbs.h")


class VerbsBuildError(NativeBuildError):
    """The emulated library could not be built; the message says what to install or fix."""


def _headers_digest() -> str:
    """Our own headers and rdma-core's verbs.h are not compiler inputs runtime.native hashes; a
    change to either must still give a new library, so their digest goes into the flags."""
    digest = hashlib.sha256()
    for header in sorted(CSRC.glob("*.h")) + ([SYSTEM_HEADER] if SYSTEM_HEADER.exists() else []):
        digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()[:16]


def library_path() -> Path:
    """Build (or find in the cache) the emulated library and return its path."""
    sources = sorted(CSRC.glob("*.c"))
    try:
        return build_shared_library(
            SONAME, sources, version_script=CSRC / "libibverbs.map",
            cflags=["-fvisibility=hidden", "-pthread", f"-I{CSRC}",
                    f"-DMC_VERBS_HEADERS=0x{_headers_digest()}"],
            ldflags=["-ldl", "-pthread"])
    except NativeBuildError as exc:
        if "infiniband/verbs.h" in str(exc):
            raise VerbsBuildError(f"{HEADERS_HINT}\n{exc}") from None
        raise VerbsBuildError(str(exc)) from None
