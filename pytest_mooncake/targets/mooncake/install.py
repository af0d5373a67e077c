"""Where a Mooncake build lives: the installed wheel, an install directory, or a requirement.

``--mc-target=mooncake[:SPEC]``:

- no SPEC: the ``mooncake-transfer-engine*`` distribution installed beside pytest (its python runs
  the drivers);
- SPEC a path (contains ``/`` or names an existing directory): an install directory holding the
  ``mooncake`` package (and optionally a ``*.dist-info`` and ``bin/``); it is put first on
  ``PYTHONPATH`` and ``PATH`` of every driver process;
- SPEC a pip requirement (``mooncake-transfer-engine-non-cuda==0.3.13.post1``): accepted when the
  installed distribution satisfies it. Installing into a private venv would download a ~100 MB
  wheel per run, so it is not done: an unsatisfied requirement is a usage error that says which
  ``pip install`` to run.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.die_with_parent import wrap

DIST_PREFIX = "mooncake-transfer-engine"
INSTALL_HINT = ("pip install mooncake-transfer-engine-non-cuda (and apt-get install -y "
                "libibverbs1 librdmacm1 libnuma1)")
DRIVER = Path(__file__).with_name("driver.py")


class SpecError(ValueError):
    """The SPEC of ``--mc-target=mooncake:SPEC`` cannot be used; the message says why."""


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def find_distributions(path: list[str] | None = None) -> list[md.Distribution]:
    """Installed ``mooncake-transfer-engine*`` distributions (on ``path``, default sys.path)."""
    found = []
    for dist in md.distributions(**({"path": path} if path is not None else {})):
        name = dist.metadata["Name"] or ""
        if _normal(name).startswith(DIST_PREFIX):
            found.append(dist)
    return found


@dataclass
class MooncakeInstall:
    """A located Mooncake build, or the reason none was found (``missing``)."""

    spec: str | None
    python: str = sys.executable
    pythonpath: str | None = None
    """An install directory to put first on PYTHONPATH/PATH of drivers."""
    dist_name: str | None = None
    dist_version: str | None = None
    missing: str | None = None
    _probe: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def version(self) -> str:
        if self.missing:
            return "not installed"
        name = self.dist_name or "mooncake"
        where = f" at {self.pythonpath}" if self.pythonpath else ""
        return f"{name} {self.dist_version or 'unknown version'}{where}"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of a driver or binary of this build (loopback binding always on)."""
        env = dict(os.environ)
        env["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self.pythonpath, env.get("PYTHONPATH", "")) if p)
            bins = [str(Path(self.pythonpath) / "bin"), self.pythonpath]
            env["PATH"] = os.pathsep.join(bins + [env.get("PATH", "")])
        env.update(extra or {})
        return env

    def driver_argv(self, *args: str) -> list[str]:
        return [self.python, str(DRIVER), *args]

    def probe(self, timeout: float = 60.0) -> dict[str, Any]:
        """Run ``driver.py probe`` with this build once; the facts it prints (API surface,
        binaries) or ``{"error": ...}``."""
        if self._probe is not None:
            return self._probe
        if self.missing:
            self._probe = {"error": self.missing}
            return self._probe
        try:
            env = self.env()
            out = subprocess.run(  # noqa: S603 (dies with the test process: die_with_parent)
                wrap(self.driver_argv("probe"), env), env=env, capture_output=True,
                timeout=timeout, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._probe = {"error": f"probing {self.python} failed: {exc}"}
            return self._probe
        try:
            facts = json.loads(out.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = out.stderr.decode(errors="replace").strip().splitlines()[-3:]
            facts = {"error": f"importing mooncake with {self.python} failed (exit "
                              f"{out.returncode}): {' | '.join(tail)}"}
        self._probe = facts
        return facts


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or spec.startswith((".", "~")) or Path(spec).is_dir()


def locate(spec: str | None) -> MooncakeInstall:
    """Resolve SPEC to an install; raises ``SpecError`` for a SPEC that cannot be used."""
    if not spec:
        dists = find_distributions()
        if not dists:
            return MooncakeInstall(spec, missing=f"Mooncake is not installed: {INSTALL_HINT}")
        dist = dists[0]
        return MooncakeInstall(spec, dist_name=dist.metadata["Name"], dist_version=dist.version)
    if _looks_like_path(spec):
        return _locate_dir(spec)
    return _locate_requirement(spec)


def _locate_dir(spec: str) -> MooncakeInstall:
    root = Path(spec).expanduser()
    if not root.is_dir():
        raise SpecError(f"--mc-target=mooncake:{spec}: {root} is not a directory (give an install "
                        f"directory holding the mooncake package, or a pip requirement)")
    root = root.resolve()
    if not (root / "mooncake" / "__init__.py").is_file():
        return MooncakeInstall(spec, pythonpath=str(root), missing=(
            f"Mooncake is not installed in {root} (no mooncake/__init__.py there): "
            f"{INSTALL_HINT}, or pip install --target {root} mooncake-transfer-engine-non-cuda"))
    dists = find_distributions([str(root)])
    name = dists[0].metadata["Name"] if dists else None
    version = dists[0].version if dists else None
    return MooncakeInstall(spec, pythonpath=str(root), dist_name=name, dist_version=version)


def _locate_requirement(spec: str) -> MooncakeInstall:
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError as exc:  # pragma: no cover (pytest depends on packaging)
        raise SpecError(f"--mc-target=mooncake:{spec}: cannot parse requirements ({exc})") from None
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise SpecError(f"--mc-target=mooncake:{spec}: neither a directory nor a valid pip "
                        f"requirement ({exc})") from None
    if not _normal(req.name).startswith(DIST_PREFIX):
        raise SpecError(f"--mc-target=mooncake:{spec}: {req.name!r} is not a Mooncake "
                        f"distribution (expected {DIST_PREFIX}*)")
    for dist in find_distributions():
        if _normal(dist.metadata["Name"]) == _normal(req.name) and \
                req.specifier.contains(dist.version, prereleases=True):
            return MooncakeInstall(spec, dist_name=dist.metadata["Name"], dist_version=dist.version)
    installed = ", ".join(f"{d.metadata['Name']} {d.version}" for d in find_distributions()) or "none"
    raise SpecError(
        f"--mc-target=mooncake:{spec}: the installed Mooncake ({installed}) does not satisfy "
        f"{spec!r}; this target does not install wheels itself: run `{sys.executable} -m pip "
        f"install '{spec}'` (or pip install --target DIR and pass --mc-target=mooncake:DIR)")
