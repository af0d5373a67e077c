"""The data files the package ships (``pytest_mooncake/data/KIND/NAME.toml``), found by name.

A wheel installed anywhere carries them, so ``--mc-matrix=reference-profiles``,
``@pytest.mark.mc_skew("rolling-upgrade")``, ``--mc-target=cluster:example`` and the expected
verdicts work from any project, not only from a clone of this repository. A project may keep
its own files beside them: ``find`` tries a path first, then the project's own
``<rootdir>/fixtures/KIND/NAME.toml``, then the shipped file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

KINDS = {
    "matrices": "run matrices (--mc-matrix)",
    "skew": "version-skew matrices (@pytest.mark.mc_skew)",
    "clusters": "cluster files (--mc-target=cluster:FILE)",
    "verdicts": "expected verdicts of the suites per target",
    "expectations": "expectations files (--mc-expect)",
}


class NotShipped(LookupError):
    """No file by that path or name; the message lists where it looked and what is shipped."""


def shipped_dir(kind: str) -> Path:
    """The package's directory of ``kind`` files (a real directory: wheels install unzipped)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of shipped file {kind!r} (kinds: {', '.join(KINDS)})")
    return Path(str(resources.files("pytest_mooncake").joinpath("data", kind)))


def shipped_names(kind: str) -> list[str]:
    """Names (file stems) of the shipped ``kind`` files, sorted."""
    return sorted(p.stem for p in shipped_dir(kind).glob("*.toml"))


def shipped(kind: str, name: str) -> Path:
    """The shipped file ``name`` of ``kind``; ``NotShipped`` listing the names when absent."""
    path = shipped_dir(kind) / f"{name}.toml"
    if not path.is_file():
        raise NotShipped(f"no shipped {KINDS[kind]} named {name!r} "
                         f"(shipped: {', '.join(shipped_names(kind)) or 'none'})")
    return path


def find(kind: str, spec: str, bases: list[Path] | tuple[Path, ...] = ()) -> Path:
    """``spec`` as a file: a path (absolute, or relative to the working directory or to one of
    ``bases``); else, when it is a bare name (no ``.toml``, no ``/``), a project's own
    ``<base>/fixtures/KIND/NAME.toml``, else the shipped one. ``NotShipped`` names every place
    it looked and the shipped names; the caller says what was missing."""
    candidates = [Path(spec)] + [base / spec for base in bases]
    if not (spec.endswith(".toml") or "/" in spec or "\\" in spec):
        candidates += [base / "fixtures" / kind / f"{spec}.toml" for base in bases]
        candidates.append(shipped_dir(kind) / f"{spec}.toml")
    seen: list[Path] = []
    for path in candidates:
        if path.is_file():
            return path
        if path.absolute() not in seen:
            seen.append(path.absolute())
    raise NotShipped(f"looked at {', '.join(str(p) for p in seen)}; shipped {KINDS[kind]}: "
                     f"{', '.join(shipped_names(kind)) or 'none'}")
