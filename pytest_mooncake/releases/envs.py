"""One cached virtualenv per Mooncake release, flavour and Python, reused between runs.

``ensure_env("mooncake-cuda13==0.3.14")`` returns the environment, creating it the first time:
``python -m venv`` and ``pip install mooncake-transfer-engine-FLAVOUR==VERSION`` plus the PyPI
packages that supply libraries the release links (the CUDA runtime). It is built in a temporary
directory beside its final place and renamed into place only when complete, under a lock file,
so two xdist workers asking at once install it once and a killed install leaves nothing that is
ever reused. Once there, an environment is used without any network access.

Environments live in ``cache_dir("releases")`` (``$MC_CACHE_DIR/releases``, else
``~/.cache/pytest-mooncake/releases``), one directory ``FLAVOUR-VERSION-pyXY`` each, with a
manifest (``mooncake-release.json``) written last: what was installed, with which commands,
how long it took, and what the release links.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import elf, loader, standins
from pytest_mooncake.releases.catalog import resolve
from pytest_mooncake.releases.package_binaries import PackageBinaries
from pytest_mooncake.releases.pipinstall import ReleaseFetchError, outer_pip, pip_argv, pip_install
from pytest_mooncake.releases.spec import ReleaseSpec, parse_spec
from pytest_mooncake.runtime.native import cache_dir

FORMAT = 1
MANIFEST = "mooncake-release.json"
LOCK_TIMEOUT_ENV = "MC_RELEASE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 1800.0
BINARIES = ("mooncake_master", "transfer_engine_bench")

Progress = Callable[[str], None]


class ReleaseEnvError(RuntimeError):
    """A release environment cannot be created or used; the message says what to do."""


def releases_root() -> Path:
    return cache_dir("releases")


def python_tag(python: str = sys.executable) -> str:
    """``py311`` for the interpreter that creates (and so runs) an environment."""
    if python == sys.executable:
        return f"py{sys.version_info.major}{sys.version_info.minor}"
    out = subprocess.run([python, "-c", "import sys; print(f'py{sys.version_info[0]}"
                                        "{sys.version_info[1]}')"],
                         capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise ReleaseEnvError(f"cannot run {python}: {out.stderr.strip()[:300]}")
    return out.stdout.strip()


@dataclass(frozen=True)
class ReleaseEnv(PackageBinaries):
    """A complete environment of one release: where things are and how to run them."""

    spec: ReleaseSpec
    root: Path
    manifest: Mapping[str, Any] = field(repr=False, hash=False, compare=False)

    @property
    def version(self) -> str:
        return self.manifest["installed_version"]

    @property
    def flavour(self) -> str:
        return self.spec.flavour or ""

    @property
    def distribution(self) -> str:
        return self.manifest["distribution"]

    @property
    def python(self) -> Path:
        """The environment's interpreter: run driver scripts with it."""
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / self.manifest["site_packages"]

    @property
    def package_dir(self) -> Path:
        """``site-packages/mooncake``: where the real binaries and ``engine.so`` are."""
        return self.site_packages / "mooncake"

    def libraries(self, base: Mapping[str, str] | None = None) -> standins.LibraryPlan:
        """How the libraries this release links outside its wheel are found here (real ones
        where the loader has them, with ``base``'s LD_LIBRARY_PATH, default this process's;
        else a PyPI copy or a stand-in). Computed once per process and library path."""
        return _plan(self.root, (os.environ if base is None else base).get("LD_LIBRARY_PATH", ""))

    @property
    def standins(self) -> list[str]:
        """Sonames served by stand-ins built here (e.g. ``["libcuda.so.1"]``)."""
        return self.libraries().standins

    def describe(self) -> str:
        """One line: ``mooncake-transfer-engine-cuda13 0.3.14: CUDA: stand-in driver, no device``."""
        return f"{self.distribution} {self.version}: {self.libraries().describe()}"

    def env(self, extra: Mapping[str, str] | None = None, *, bind_address: str = "127.0.0.1",
            base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment variables of a driver process or binary of this release: its venv first
        on PATH, supplied libraries first on LD_LIBRARY_PATH, ``MC_TCP_BIND_ADDRESS`` set (a
        Mooncake process otherwise binds the first non-loopback address), no PYTHONPATH or
        PYTHONHOME of the caller (the release's own packages only), then ``extra``."""
        env = dict(os.environ if base is None else base)
        for name in ("PYTHONPATH", "PYTHONHOME", "__PYVENV_LAUNCHER__"):
            env.pop(name, None)
        env["VIRTUAL_ENV"] = str(self.root)
        env["PATH"] = os.pathsep.join([str(self.root / "bin"), env.get("PATH", os.defpath)])
        dirs = self.libraries(env).library_dirs
        rest = loader.without_own_dirs(env.get("LD_LIBRARY_PATH", ""))
        ld = os.pathsep.join([*dirs, rest] if rest else dirs)
        if ld:
            env["LD_LIBRARY_PATH"] = ld
        else:
            env.pop("LD_LIBRARY_PATH", None)
        env["MC_TCP_BIND_ADDRESS"] = bind_address
        env.update(extra or {})
        return env

    def unresolved(self, name: str) -> list[str]:
        """Sonames the loader still cannot find for the package file ``name`` under ``env()``."""
        return loader.unresolved(self.package_dir / name, self.env())

    @property
    def install_seconds(self) -> float:
        return float(self.manifest.get("install_seconds", 0.0))

    def size_bytes(self) -> int:
        total = 0
        for path in self.root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        return total


@functools.lru_cache(maxsize=32)
def _plan(root: Path, ld_library_path: str) -> standins.LibraryPlan:
    manifest = _read_manifest(root)
    if manifest is None:
        raise ReleaseEnvError(f"{root} is not a complete release environment (no valid {MANIFEST})")
    pip_provided = {soname: str(root / rel) for soname, rel in manifest["pip_provided"].items()}
    return standins.plan(manifest["external"], pip_provided, manifest["driver_imports"],
                         ld_library_path)


def _read_manifest(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if not (root / "bin" / "python").exists():
        return None
    return data


def env_dir(spec: ReleaseSpec, python: str = sys.executable) -> Path:
    return releases_root() / f"{spec.key}-{python_tag(python)}"


def installed_flavours(version: str, python: str = sys.executable) -> list[str]:
    """Flavours with a complete environment of ``version`` (no network)."""
    tag = python_tag(python)
    return [e.spec.flavour for e in installed_envs() if e.spec.version == version
            and e.root.name.endswith(f"-{tag}") and e.spec.flavour]


def installed_envs() -> list[ReleaseEnv]:
    """Every complete environment in the cache, sorted by version then flavour."""
    from packaging.version import Version

    found = []
    for root in releases_root().iterdir():
        if root.name.startswith(".") or not root.is_dir():
            continue
        manifest = _read_manifest(root)
        if manifest is not None:
            spec = ReleaseSpec(manifest["version"], manifest["flavour"])
            found.append(ReleaseEnv(spec, root, manifest))
    return sorted(found, key=lambda e: (Version(e.spec.version), e.flavour, e.root.name))


def as_spec(release: ReleaseSpec | str, python: str = sys.executable, *,
            ask_pip: bool = True) -> ReleaseSpec:
    """Parse and complete a release (flavour from the cache first, then PyPI)."""
    spec = parse_spec(release) if isinstance(release, str) else release
    return resolve(spec, installed_flavours(spec.version, python), ask_pip=ask_pip)


def find_env(release: ReleaseSpec | str, python: str = sys.executable) -> ReleaseEnv | None:
    """The complete environment of ``release``, or None; never touches the network."""
    spec = as_spec(release, python, ask_pip=False)
    root = env_dir(spec, python)
    manifest = _read_manifest(root)
    return None if manifest is None else ReleaseEnv(spec, root, manifest)


def ensure_env(release: ReleaseSpec | str, *, python: str = sys.executable,
               progress: Progress | None = None, lock_timeout: float | None = None) -> ReleaseEnv:
    """The environment of ``release``, installed first if needed (see the module doc).

    Raises ``SpecError`` for a string naming no release, ``ReleaseFetchError`` (with the exact
    pip command) when pip cannot fetch it, ``StandInError`` when the release needs a stand-in
    that lacks symbols it imports, ``ReleaseEnvError`` for anything else."""
    spec = as_spec(release, python)
    found = find_env(spec, python)
    if found is None:
        root = env_dir(spec, python)
        say = progress or (lambda _msg: None)
        timeout = lock_timeout if lock_timeout is not None else _lock_timeout()
        with _InstallLock(root.with_name(f".{root.name}.lock"), timeout, say, spec):
            found = find_env(spec, python)
            if found is None:
                _remove_leftovers(root)
                found = _build(spec, root, python, say)
    found.libraries()  # a stand-in that cannot serve this release fails here, loudly
    return found


def remove_env(release: ReleaseSpec | str, python: str = sys.executable) -> Path | None:
    """Delete the environment of ``release`` (under its lock); the path removed, or None."""
    spec = as_spec(release, python, ask_pip=False)
    root = env_dir(spec, python)
    with _InstallLock(root.with_name(f".{root.name}.lock"), _lock_timeout(), lambda _m: None, spec):
        if not root.exists():
            return None
        _discard(root)
        _plan.cache_clear()
        return root


def _lock_timeout() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ReleaseEnvError(f"{LOCK_TIMEOUT_ENV} must be a positive number of seconds (got {raw!r})")
    return value


class _InstallLock:
    """An exclusive ``flock`` on ``path`` with a deadline, saying whom it waits for."""

    def __init__(self, path: Path, timeout: float, say: Progress, spec: ReleaseSpec):
        self.path, self.timeout, self.say, self.spec = path, timeout, say, spec
        self.fh: Any = None

    def __enter__(self) -> _InstallLock:
        self.fh = open(self.path, "a+")  # noqa: SIM115 (held until __exit__)
        deadline = time.monotonic() + self.timeout
        next_note = time.monotonic()
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                holder = self.path.read_text().strip() or "another process"
                if now >= deadline:
                    self.fh.close()
                    raise ReleaseEnvError(
                        f"{holder} held {self.path} for over {self.timeout:.0f} s while installing "
                        f"{self.spec}; wait for it, or raise {LOCK_TIMEOUT_ENV}") from None
                if now >= next_note:
                    self.say(f"waiting for {holder} to finish installing {self.spec}")
                    next_note = now + 15
                time.sleep(0.2)
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()}")
        self.fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.close()


def _build_dirs(root: Path) -> list[Path]:
    return sorted(root.parent.glob(f".{root.name}.build-*"))


def _remove_leftovers(root: Path) -> None:
    """Under the lock: half-made builds of ``root`` (their builder was killed) and an incomplete
    ``root`` itself are removed, never reused."""
    for stale in _build_dirs(root):
        _discard(stale)
    for trash in root.parent.glob(f".{root.name}.trash-*"):  # a deletion that was interrupted
        shutil.rmtree(trash, ignore_errors=True)
    if root.exists() and _read_manifest(root) is None:
        _discard(root)


def _discard(path: Path) -> None:
    trash = path.with_name(f".{path.name.lstrip('.')}.trash-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _build(spec: ReleaseSpec, root: Path, python: str, say: Progress) -> ReleaseEnv:
    tmp = root.with_name(f".{root.name}.build-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    began = time.monotonic()
    try:
        venv_argv = [python, "-m", "venv", *(["--without-pip"] if outer_pip() else []), str(tmp)]
        say(f"creating {tmp.name}: {' '.join(venv_argv[:-1])}")
        venv = subprocess.run(venv_argv, capture_output=True, text=True, timeout=300, check=False)
        if venv.returncode != 0:
            raise ReleaseEnvError(f"`{python} -m venv {tmp}` failed (exit {venv.returncode}): "
                                  f"{venv.stderr.strip()[-500:]}")
        tmp_python = str(tmp / "bin" / "python")
        say(f"pip install {spec.requirement}")
        pip_install(tmp_python, [spec.requirement], what=f"Mooncake {spec}")
        command = _final_command(tmp_python, tmp, root, [spec.requirement])
        site = _site_packages(tmp_python)
        say(f"scanning what {spec} links")
        linked = scan_links(tmp / site / "mooncake")
        providers = [standins.PIP_LIBRARIES[s] for s in linked["external"]
                     if s in standins.PIP_LIBRARIES]
        pip_provided: dict[str, str] = {}
        provider_command = None
        if providers:
            reqs = [p.requirement for p in providers]
            say(f"pip install {' '.join(reqs)} (libraries {spec} links)")
            pip_install(tmp_python, reqs, what=f"the libraries {spec} links")
            provider_command = _final_command(tmp_python, tmp, root, reqs)
            for p in providers:
                hits = sorted((tmp / site).rglob(p.soname))
                if not hits:
                    raise ReleaseEnvError(f"{p.requirement} installed no {p.soname} under {tmp / site}")
                pip_provided[p.soname] = str(hits[0].relative_to(tmp))
        manifest = {
            "format": FORMAT, "spec": str(spec), "version": spec.version,
            "flavour": spec.flavour, "distribution": spec.distribution,
            "installed_version": _installed_version(tmp_python, spec.distribution),
            "python": python, "python_version": _python_version(tmp_python),
            "site_packages": site, "pip_command": command, "providers_command": provider_command,
            "install_seconds": round(time.monotonic() - began, 1),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            **linked, "pip_provided": pip_provided,
        }
        _retarget_scripts(tmp, root)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        os.rename(tmp, root)
    except BaseException:
        _discard(tmp)
        raise
    say(f"installed {spec} in {manifest['install_seconds']:.0f} s at {root}")
    return ReleaseEnv(spec, root, manifest)


def _final_command(tmp_python: str, tmp: Path, root: Path, reqs: list[str]) -> str:
    """The pip command as a user would run it on the finished environment."""
    return shlex.join([*pip_argv(tmp_python.replace(str(tmp), str(root))), "install", *reqs])


def _query(python: str, code: str) -> str:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                         check=False)
    if out.returncode != 0:
        raise ReleaseEnvError(f"{python} -c {code!r} failed: {out.stderr.strip()[-400:]}")
    return out.stdout.strip()


def _site_packages(python: str) -> str:
    purelib = _query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    prefix = _query(python, "import sys; print(sys.prefix)")
    return os.path.relpath(purelib, prefix)


def _python_version(python: str) -> str:
    return _query(python, "import platform; print(platform.python_version())")


def _installed_version(python: str, distribution: str) -> str:
    return _query(python, f"import importlib.metadata as m; print(m.version({distribution!r}))")


def scan_links(package_dir: Path) -> dict[str, Any]:
    """What the release's ELF files link: every file's DT_NEEDED, the sonames found neither in
    the wheel nor beside it (``external``), and the CUDA driver symbols each file imports."""
    if not package_dir.is_dir():
        raise ReleaseEnvError(f"the release installed no mooncake package at {package_dir}")
    bundled = {p.name for p in package_dir.parent.glob("mooncake_transfer_engine*.libs/*")}
    files = list(elf.elf_files(package_dir))
    bundled |= {p.name for p in files}
    linked, external, driver_imports = {}, set(), {}
    for path in files:
        rel = str(path.relative_to(package_dir))
        needs = elf.needed(path)
        linked[rel] = needs
        external |= {n for n in needs if n not in bundled}
        if standins.CUDA_DRIVER in needs:
            driver_api = re.compile(standins.STAND_INS[standins.CUDA_DRIVER].symbols)
            driver_imports[rel] = sorted(s for s in elf.undefined_symbols(path)
                                         if driver_api.match(s))
    return {"needed": linked, "external": sorted(external), "driver_imports": driver_imports}


def _retarget_scripts(tmp: Path, root: Path) -> None:
    """Scripts pip and venv wrote name the build directory; make them name the final one."""
    old, new = str(tmp).encode(), str(root).encode()
    for path in [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]:
        if not path.is_file() or path.is_symlink() or elf.is_elf(path):
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))


__all__ = ["ReleaseEnv", "ReleaseEnvError", "ReleaseFetchError", "ensure_env", "find_env",
           "installed_envs", "remove_env", "releases_root"]
