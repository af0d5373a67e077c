"""A Mooncake build this package did not install: the wheel in an interpreter's environment
(the plugin's own, by default) or an install directory put first on ``PYTHONPATH``.

It answers what ``ReleaseEnv`` answers (where the python, the package and the binaries are, the
environment of a driver process, how the libraries it links are found here), so
``facts_of`` probes it the same way and the Mooncake targets drive it through one code path.
Its probed facts are cached under ``cache_dir("builds")``, keyed by the package directory and
the modification time of its files, so a reinstalled wheel is probed again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import loader, standins
from pytest_mooncake.releases.envs import ReleaseEnv, scan_links
from pytest_mooncake.releases.package_binaries import PackageBinaries
from pytest_mooncake.runtime.native import cache_dir

LINKS_FILE = "links.json"
_FIND_PACKAGE = ("import importlib.util, os; s = importlib.util.find_spec('mooncake'); "
                 "print(os.path.dirname(s.origin) if s and s.origin else '')")


@dataclass(frozen=True)
class LocalBuild(PackageBinaries):
    """An installed Mooncake build (see the module doc)."""

    python: Path
    package_dir: Path
    distribution: str
    version: str
    pythonpath: str | None = None
    """An install directory drivers get first on PYTHONPATH and PATH (None: the wheel)."""

    @classmethod
    def find(cls, python: str = sys.executable, pythonpath: str | None = None,
             distribution: str | None = None, version: str | None = None) -> LocalBuild | None:
        """The build importable as ``mooncake`` by ``python`` (with ``pythonpath`` first), or
        None when there is none. ``mooncake`` is located, never imported, in this process."""
        package = _package_dir(python, pythonpath)
        if package is None:
            return None
        return cls(Path(python), package, distribution or "mooncake", version or "unknown",
                   pythonpath)

    @property
    def root(self) -> Path:
        """Where its probed facts are cached."""
        return cache_dir("builds", f"{self.distribution}-{self.version}-{_fingerprint(self.package_dir)}")

    def links(self) -> dict[str, Any]:
        """What its ELF files link (``envs.scan_links``), cached with its facts."""
        path = self.root / LINKS_FILE
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        linked = scan_links(self.package_dir)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(linked))
        os.replace(tmp, path)
        return linked

    def libraries(self, base: Mapping[str, str] | None = None) -> standins.LibraryPlan:
        """How the libraries it links outside its package are found here (real ones first;
        stand-ins only where the loader finds none)."""
        raw = (os.environ if base is None else base).get("LD_LIBRARY_PATH", "")
        return _plan(self, raw)

    @property
    def standins(self) -> list[str]:
        return self.libraries().standins

    def describe(self) -> str:
        return f"{self.distribution} {self.version}: {self.libraries().describe()}"

    def env(self, extra: Mapping[str, str] | None = None, *, bind_address: str = "127.0.0.1",
            base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment of a driver process or binary of this build: the install directory
        first on PYTHONPATH and PATH (where there is one), stand-in libraries first on
        LD_LIBRARY_PATH (where needed), ``MC_TCP_BIND_ADDRESS`` set, then ``extra``."""
        env = dict(os.environ if base is None else base)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self.pythonpath, env.get("PYTHONPATH", "")) if p)
            bins = [str(Path(self.pythonpath) / "bin"), self.pythonpath]
            env["PATH"] = os.pathsep.join([*bins, env.get("PATH", os.defpath)])
        dirs = self.libraries(env).library_dirs
        if dirs:
            rest = loader.without_own_dirs(env.get("LD_LIBRARY_PATH", ""))
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*dirs, rest] if rest else dirs)
        env["MC_TCP_BIND_ADDRESS"] = bind_address
        env.update(extra or {})
        return env


def _package_dir(python: str, pythonpath: str | None) -> Path | None:
    if pythonpath:
        candidate = Path(pythonpath) / "mooncake"
        return candidate if (candidate / "__init__.py").is_file() else None
    if python == sys.executable:
        spec = importlib.util.find_spec("mooncake")
        return Path(spec.origin).parent if spec is not None and spec.origin else None
    out = subprocess.run([python, "-c", _FIND_PACKAGE], capture_output=True, text=True,
                         timeout=60, check=False)
    found = out.stdout.strip()
    return Path(found) if out.returncode == 0 and found else None


def _fingerprint(package_dir: Path) -> str:
    """Changes when the build's files change (a reinstall, another build at the same path)."""
    parts = [str(package_dir.resolve())]
    for path in sorted(package_dir.iterdir()):
        if path.is_file():
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _plan(build: LocalBuild, ld_library_path: str) -> standins.LibraryPlan:
    linked = build.links()
    return standins.plan(linked["external"], {}, linked["driver_imports"], ld_library_path)


Build = ReleaseEnv | LocalBuild
"""What facts are probed of: a release environment this package installed, or a build it found."""
