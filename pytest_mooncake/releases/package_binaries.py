"""The executables a Mooncake build ships in its package directory, found the same way for an
installed wheel (``local_build.LocalBuild``) and a cached release environment
(``envs.ReleaseEnv``)."""

from __future__ import annotations

import os
from pathlib import Path


class PackageBinaries:
    """``binary(name)`` and the two a target starts, from ``package_dir``."""

    package_dir: Path

    def binary(self, name: str) -> Path | None:
        """The real executable ``name`` in the package directory (not a ``bin/`` wrapper, which
        spawns it as a child a signal to the wrapper does not reach), or None."""
        path = self.package_dir / name
        return path if path.is_file() and os.access(path, os.X_OK) else None

    @property
    def master_binary(self) -> Path | None:
        return self.binary("mooncake_master")

    @property
    def bench_binary(self) -> Path | None:
        return self.binary("transfer_engine_bench")
