"""Libraries a release links that this machine lacks, and what supplies them.

Two kinds of supplier: a PyPI package installed into the release's environment (the CUDA
runtime, ``libcudart.so.N``), and a stand-in built from a C source shipped here (the CUDA
driver, ``libcuda.so.1``, which no package provides: it comes with a GPU driver). Either is
used only when the dynamic loader finds no real library of that soname
(``loader.system_libraries``); where a real one exists, the real one is used.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_mooncake.releases import elf, loader
from pytest_mooncake.runtime.native import build_shared_library

HERE = Path(__file__).parent


class StandInError(RuntimeError):
    """A stand-in cannot serve a release (it lacks symbols the release imports, or it cannot be
    built); the message names what is missing and where to add it."""


@dataclass(frozen=True)
class PipLibrary:
    """A library a PyPI package ships; installed into every environment whose release links it."""

    soname: str
    requirement: str
    label: str


@dataclass(frozen=True)
class BuiltStandIn:
    """A library built from a C source in this package when the machine has no real one."""

    soname: str
    source: str
    label: str
    symbols: str
    """Regex of the imported symbols this library must export (the rest come from elsewhere)."""

    @property
    def source_path(self) -> Path:
        return HERE / self.source

    def build(self) -> Path:
        try:
            return build_shared_library(self.soname, [self.source_path])
        except Exception as exc:  # NativeBuildError, OSError: say which stand-in
            raise StandInError(f"cannot build the stand-in {self.soname} from "
                               f"{self.source_path}: {exc}") from None

    def exported(self) -> frozenset[str]:
        return _exported(str(self.build()))

    def gaps(self, imports: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """``{file: [symbols it imports that the stand-in lacks]}`` for files with a gap."""
        have = self.exported()
        wanted = re.compile(self.symbols)
        out = {}
        for name, symbols in imports.items():
            lacking = sorted(s for s in symbols if wanted.match(s) and s not in have)
            if lacking:
                out[name] = lacking
        return out


@functools.lru_cache(maxsize=8)
def _exported(path: str) -> frozenset[str]:
    return frozenset(elf.defined_symbols(Path(path)))


PIP_LIBRARIES: dict[str, PipLibrary] = {
    lib.soname: lib for lib in (
        PipLibrary("libcudart.so.12", "nvidia-cuda-runtime-cu12>=12,<13", "CUDA 12 runtime"),
        PipLibrary("libcudart.so.13", "nvidia-cuda-runtime>=13,<14", "CUDA 13 runtime"),
    )
}
STAND_INS: dict[str, BuiltStandIn] = {
    s.soname: s for s in (
        BuiltStandIn("libcuda.so.1", "cuda_driver_standin.c", "stand-in driver, no device",
                     symbols=r"^cu[A-Z]"),
    )
}
CUDA_DRIVER = "libcuda.so.1"
CUDA_RUNTIME = re.compile(r"^libcudart\.so\.\d+$")


@dataclass(frozen=True)
class Supplied:
    """A library this run supplies instead of the machine."""

    soname: str
    path: Path
    how: str
    """``stand-in`` (built here) or ``pypi:<requirement>``."""


@dataclass(frozen=True)
class LibraryPlan:
    """How each library a release links outside its own wheel is found on this machine."""

    system: Mapping[str, str] = field(default_factory=dict)
    """Real libraries the loader found: soname -> path."""
    supplied: tuple[Supplied, ...] = ()
    missing: tuple[str, ...] = ()
    """Sonames neither the machine nor a supplier provides."""

    @property
    def library_dirs(self) -> list[str]:
        """Directories to put first on ``LD_LIBRARY_PATH`` (suppliers only)."""
        out: list[str] = []
        for s in self.supplied:
            if str(s.path.parent) not in out:
                out.append(str(s.path.parent))
        return out

    @property
    def standins(self) -> list[str]:
        """Sonames served by a stand-in built here."""
        return [s.soname for s in self.supplied if s.how == "stand-in"]

    def describe(self) -> str:
        """One line, e.g. ``CUDA: stand-in driver, no device; runtime libcudart.so.13 (system)``."""
        parts = []
        supplied = {s.soname: s for s in self.supplied}
        linked = set(self.system) | set(supplied) | set(self.missing)
        if CUDA_DRIVER in supplied:
            parts.append(STAND_INS[CUDA_DRIVER].label)
        elif CUDA_DRIVER in self.system:
            parts.append(f"real driver {self.system[CUDA_DRIVER]}")
        for soname in sorted(n for n in linked if CUDA_RUNTIME.match(n)):
            if soname in supplied:
                parts.append(f"runtime {soname} from PyPI {supplied[soname].how.split(':', 1)[1]}")
            elif soname in self.system:
                parts.append(f"runtime {self.system[soname]} (system)")
        cuda = "CUDA: " + ("; ".join(parts) if parts else "not linked")
        if self.missing:
            cuda += f"; MISSING: {', '.join(self.missing)}"
        return cuda


def plan(external: Sequence[str], pip_provided: Mapping[str, str],
         driver_imports: Mapping[str, Sequence[str]], ld_library_path: str | None = None
         ) -> LibraryPlan:
    """The plan for a release that links ``external`` sonames (outside its wheel), with
    ``pip_provided`` (soname -> file installed in its environment) and ``driver_imports``
    (file -> symbols it imports from the CUDA driver). Raises ``StandInError`` when a stand-in
    is needed but lacks symbols the release imports."""
    found = loader.system_libraries(external, ld_library_path)
    system = {n: p for n, p in found.items() if p}
    supplied, missing = [], []
    for soname in sorted(n for n, p in found.items() if not p):
        if soname in pip_provided and Path(pip_provided[soname]).is_file():
            supplied.append(Supplied(soname, Path(pip_provided[soname]),
                                     f"pypi:{PIP_LIBRARIES[soname].requirement}"))
        elif soname in STAND_INS:
            stand_in = STAND_INS[soname]
            gaps = stand_in.gaps(driver_imports) if soname == CUDA_DRIVER else {}
            if gaps:
                listing = "; ".join(f"{f}: {', '.join(s)}" for f, s in sorted(gaps.items()))
                raise StandInError(
                    f"the stand-in {soname} lacks symbols this release imports ({listing}); add "
                    f"them to {stand_in.source_path} (returning CUDA_ERROR_NO_DEVICE)")
            supplied.append(Supplied(soname, stand_in.build(), "stand-in"))
        else:
            missing.append(soname)
    return LibraryPlan(system, tuple(supplied), tuple(missing))
