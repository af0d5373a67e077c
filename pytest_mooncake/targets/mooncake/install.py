"""Where a Mooncake build lives: the installed wheel, an install directory, or a requirement.

``--mc-target=mooncake[:SPEC]`` or ``--mc-target=mooncake==VERSION``:

- no SPEC: the ``mooncake-transfer-engine*`` distribution installed beside pytest (its python runs
  the drivers);
- SPEC a path (contains ``/`` or names an existing directory): an install directory holding the
  ``mooncake`` package (and optionally a ``*.dist-info`` and ``bin/``); it is put first on
  ``PYTHONPATH`` and ``PATH`` of every driver process;
- SPEC a pip requirement (``mooncake-transfer-engine-non-cuda==0.3.13.post1``): accepted when the
  installed distribution satisfies it; an unsatisfied requirement is a usage error that says which
  ``pip install`` to run (or to judge that release by version);
- ``mooncake==VERSION`` (and every form ``releases.spec`` accepts: ``mooncake-cuda13==0.3.14``,
  ``mooncake-transfer-engine-non-cuda==0.3.12.post1``, ``0.3.14``): that release in its own
  cached environment (``releases.ensure_env``), installed once and reused offline; the plugin's
  own environment needs no Mooncake wheel for it.

Every build is a ``releases`` build (``ReleaseEnv`` or ``LocalBuild``): its python runs the
drivers, and what it has is probed from it (``releases.facts_of``), never assumed.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_mooncake.releases import (
    Build,
    LocalBuild,
    ProbeFailed,
    ReleaseEnvError,
    ReleaseFacts,
    ReleaseFetchError,
    ReleaseSpec,
    StandInError,
    ensure_env,
    facts_of,
    parse_spec,
)
from pytest_mooncake.releases import SpecError as ReleaseSpecError
from pytest_mooncake.releases.envs import as_spec

DIST_PREFIX = "mooncake-transfer-engine"
INSTALL_HINT = ("pip install mooncake-transfer-engine-non-cuda (and apt-get install -y "
                "libibverbs1 librdmacm1 libnuma1)")
DRIVER = Path(__file__).parent / "driver" / "mooncake_driver.py"


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
    """A located Mooncake build (``build``: a release environment or an installed build), or
    the reason none was found (``missing``)."""

    spec: str | None
    build: Build | None = None
    pythonpath: str | None = None
    """An install directory drivers get first on PYTHONPATH/PATH."""
    dist_name: str | None = None
    dist_version: str | None = None
    missing: str | None = None
    release: ReleaseSpec | None = None
    """The release a versioned target (``mooncake==VERSION``) names."""

    @property
    def python(self) -> str:
        """The interpreter that runs the build's driver processes."""
        return str(self.build.python) if self.build is not None else sys.executable

    @property
    def version(self) -> str:
        if self.missing:
            return "not installed"
        name = self.dist_name or "mooncake"
        where = f" at {self.pythonpath}" if self.pythonpath else ""
        return f"{name} {self.dist_version or 'unknown version'}{where}"

    @property
    def libraries(self) -> str:
        """How the libraries the build links are found here, e.g. ``CUDA: stand-in driver, no
        device`` ("" when unknown)."""
        if self.build is None:
            return ""
        try:
            return self.build.libraries().describe()
        except (OSError, RuntimeError) as exc:
            return f"libraries not known: {exc}"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of a driver or binary of this build (loopback binding always on)."""
        if self.build is not None:
            return self.build.env(extra)
        env = dict(os.environ)
        env["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
        env.update(extra or {})
        return env

    def driver_argv(self, *args: str) -> list[str]:
        return [self.python, str(DRIVER), *args]

    def facts(self, live: bool = True) -> ReleaseFacts:
        """What the build has, probed from the build itself (``releases.facts_of``: its
        ``mooncake_master --help``, Python API, ELF strings; ``live``: a master started alone)
        and cached with it."""
        if self.build is None:
            raise ProbeFailed(self.missing or "no build")
        return facts_of(self.build, live=live)


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or spec.startswith((".", "~")) or Path(spec).is_dir()


def _installed(spec: str | None, dist: md.Distribution | None,
               pythonpath: str | None = None) -> MooncakeInstall:
    """An install of the build importable as ``mooncake`` (with ``pythonpath`` first)."""
    name = dist.metadata["Name"] if dist is not None else None
    version = dist.version if dist is not None else None
    build = LocalBuild.find(sys.executable, pythonpath, name, version)
    missing = None if build is not None else (
        f"Mooncake is not installed: {name} {version} is listed but no mooncake package is "
        f"importable; {INSTALL_HINT}")
    return MooncakeInstall(spec, build=build, pythonpath=pythonpath, dist_name=name,
                           dist_version=version, missing=missing)


def locate(spec: str | None) -> MooncakeInstall:
    """Resolve SPEC to an install; raises ``SpecError`` for a SPEC that cannot be used."""
    if not spec:
        dists = find_distributions()
        if not dists:
            return MooncakeInstall(spec, missing=f"Mooncake is not installed: {INSTALL_HINT}")
        return _installed(spec, dists[0])
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
    return _installed(spec, dists[0] if dists else None, str(root))


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
            return _installed(spec, dist)
    installed = ", ".join(f"{d.metadata['Name']} {d.version}" for d in find_distributions()) or "none"
    raise SpecError(
        f"--mc-target=mooncake:{spec}: the installed Mooncake ({installed}) does not satisfy "
        f"{spec!r}; mooncake:REQUIREMENT judges the installed wheel only: run `{sys.executable} "
        f"-m pip install '{spec}'`, or judge a release in its own cached environment with "
        f"--mc-target=mooncake==VERSION (e.g. mooncake-cuda13==0.3.14)")


# ------------------------------------------------------------------------------ by version

RELEASE_FORM = re.compile(r"^\s*(mooncake[A-Za-z0-9_.-]*\s*==|[0-9])")
"""``--mc-target`` values naming a release by version (``releases.spec``'s forms)."""


def names_release(text: str) -> bool:
    """Whether a ``--mc-target`` value names a Mooncake release by version
    (``mooncake==0.3.12.post1``, ``mooncake-cuda13==0.3.14``, ``0.3.14``, ...)."""
    return bool(RELEASE_FORM.match(text))


def release_label(text: str) -> str:
    """The one name of the release ``text`` names, ``mooncake-FLAVOUR==VERSION`` (flavour
    chosen as ``releases`` chooses it, without asking PyPI: an installed environment, else the
    table of published flavours); ``SpecError`` for a string naming no release."""
    try:
        return str(as_spec(text, ask_pip=False))
    except ReleaseSpecError as exc:
        raise SpecError(f"--mc-target={text}: {exc}") from None


def locate_release(text: str, progress: Callable[[str], None] | None = None) -> MooncakeInstall:
    """The release ``text`` names in its own cached environment, installed first if needed
    (``releases.ensure_env``); ``SpecError`` naming the pip command when it cannot be had."""
    try:
        spec = as_spec(parse_spec(text))
        env = ensure_env(spec, progress=progress)
    except ReleaseSpecError as exc:
        raise SpecError(f"--mc-target={text}: {exc}") from None
    except (ReleaseFetchError, ReleaseEnvError, StandInError) as exc:
        raise SpecError(f"--mc-target={text}: cannot install {spec}: {exc}") from None
    return MooncakeInstall(str(spec), build=env, dist_name=env.distribution,
                           dist_version=env.version, release=spec)
