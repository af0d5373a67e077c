"""The plugin as someone else's project gets it: build the wheel, install it into a fresh
virtualenv outside this repository, and run a suite file and a shipped matrix from there.

    python scripts/wheel_check.py              # the whole check, with timings
    python scripts/wheel_check.py --prepare    # only fill the wheelhouse (scripts/setup.sh)
    python scripts/wheel_check.py --keep DIR   # keep the venv and the project in DIR

What it proves: the wheel carries the package data (run matrices, skew matrices, cluster
files, expected verdicts, the report schema, the Allure 3 config), ``--mc-matrix=reference-profiles`` and
``@pytest.mark.mc_skew("rolling-upgrade")`` are found by name from a directory that is not
this repository, and the pytest11 entry point and the reference engine's processes work from
site-packages.

Installing the dependencies from the package index costs ~4-5 min on this machine (about 5 s
of index lookups per package), so they come from a wheelhouse, built once per dependency set
(``pip wheel`` into ``$MC_CACHE_DIR/wheelhouse/<hash of the requirements>``, reusing pip's own
cache) and used offline afterwards (``pip install --no-index --find-links``): the wheel itself
is built and installed fresh every time, and a dependency missing from ``pyproject.toml`` still
fails the import in the fresh venv. Exit status: 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "pytest_mooncake", "reference_engine")
SUITE_FILE = ROOT / "suites" / "compat" / "test_rolling_upgrade.py"
"""A suite file whose tests use a shipped skew matrix by name (``rolling-upgrade``)."""
RUN_ARGS = ("--mc-matrix=reference-profiles", "--mc-only=MR-8")
"""A shipped run matrix by name; MR-8 keeps it to one quick test per column."""
PIP_TIMEOUT = 900.0
RUN_TIMEOUT = 300.0


class CheckFailed(RuntimeError):
    """A step failed; the message says which and shows its output."""


def requirements() -> list[str]:
    """Everything the fresh venv needs: the build requirements and the runtime dependencies."""
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [*doc["build-system"]["requires"], "wheel", *doc["project"]["dependencies"]]


def wheelhouse_key(reqs: list[str]) -> str:
    text = json.dumps([sys.version_info[:2], sorted(reqs)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    root = os.environ.get("MC_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytest-mooncake")
    path = Path(root).expanduser() / "wheelhouse"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(step: str, argv: list[str], timeout: float, **kwargs) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{step}: no answer within {timeout:.0f}s: {' '.join(argv)}\n"
                          f"{exc.stdout or ''}{exc.stderr or ''}") from None
    if proc.returncode != 0:
        raise CheckFailed(f"{step} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                          f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return proc.stdout


def wheelhouse() -> Path:
    """Wheels of every requirement, built once per requirement set (under a lock, in a
    temporary directory renamed into place, so a killed build is never used)."""
    reqs = requirements()
    root = cache_root()
    final = root / wheelhouse_key(reqs)
    if (final / ".complete").is_file():
        return final
    with _locked(root / ".lock"):
        if (final / ".complete").is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
        try:
            _run("filling the wheelhouse", [sys.executable, "-m", "pip", "wheel", "-q",
                                             "-w", str(tmp), *reqs], PIP_TIMEOUT)
            (tmp / ".complete").write_text("\n".join(reqs) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in root.iterdir():  # other requirement sets are stale
            if old.is_dir() and old != final and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
    return final


def build_wheel(workdir: Path, house: Path) -> Path:
    """The wheel of a copy of the sources (the repository itself gets no build/ or egg-info)."""
    src = workdir / "src"
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=ignore)
        else:
            shutil.copy2(origin, src / name)
    dist = workdir / "dist"
    _run("building the wheel", [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                "--no-index", "--find-links", str(house), "-w", str(dist),
                                str(src)], PIP_TIMEOUT)
    shutil.rmtree(src)
    wheels = list(dist.glob("pytest_mooncake-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"building the wheel left {wheels} in {dist}, expected one wheel")
    return wheels[0]


def fresh_venv(venv: Path, wheel: Path, house: Path) -> Path:
    """A new virtualenv with only the wheel and its declared dependencies; its python."""
    _run("creating the venv", [sys.executable, "-m", "venv", str(venv)], 120)
    python = venv / "bin" / "python"
    _run("installing the wheel", [str(python), "-m", "pip", "install", "-q", "--no-index",
                                  "--find-links", str(house), str(wheel)], PIP_TIMEOUT)
    return python


def outside_env() -> dict[str, str]:
    """This environment without anything that points back at the repository or its venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
           and not k.startswith(("PYTEST_", "MC_TARGET", "MC_MATRIX"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_outside(python: Path, project: Path) -> dict:
    """Run the suite file with a shipped matrix from ``project``; the JSON report."""
    project.mkdir(parents=True, exist_ok=True)
    shutil.copy2(SUITE_FILE, project / SUITE_FILE.name)
    env = outside_env()
    where = _run("importing the plugin", [str(python), "-c", (
        "import pytest_mooncake, reference_engine; "
        "from pytest_mooncake.schemas.shipped_files import shipped, shipped_names; "
        "print(pytest_mooncake.__file__); "
        "print(*[k + '=' + ','.join(shipped_names(k)) for k in "
        "('matrices', 'skew', 'clusters', 'verdicts', 'expectations')], sep='\\n'); "
        "shipped('clusters', 'example'); shipped('verdicts', 'reference'); "
        "shipped('expectations', 'mooncake-0.3.13.post1@ha-oplog'); "
        "from pytest_mooncake.report.allure_run_files import ALLURERC; "
        "from importlib import resources; "
        "assert ALLURERC.is_file(), ALLURERC; "
        "assert resources.files('pytest_mooncake').joinpath('data/report.schema.json').is_file()")],
        120, cwd=project, env=env)
    site = Path(where.splitlines()[0]).resolve()
    if ROOT in site.parents or python.parent.parent.resolve() not in site.parents:
        raise CheckFailed(f"pytest_mooncake was imported from {site}, not from the fresh venv")
    report = project / "report.json"
    _run("running the suite file", [str(python), "-m", "pytest", "-p", "pytest_mooncake",
                                    SUITE_FILE.name, *RUN_ARGS, f"--mc-report={report}",
                                    "-p", "no:cacheprovider", "-q"],
         RUN_TIMEOUT, cwd=project, env=env)
    return json.loads(report.read_text())


def check(workdir: Path, say=print) -> dict:
    """Every step; returns the report of the run outside and the seconds of each step."""
    times: dict[str, float] = {}

    def timed(name, fn, *args):
        start = time.monotonic()
        out = fn(*args)
        times[name] = round(time.monotonic() - start, 1)
        say(f"{name}: {times[name]}s")
        return out

    house = timed("wheelhouse", wheelhouse)
    wheel = timed("build wheel", build_wheel, workdir / "build", house)
    python = timed("fresh venv + install", fresh_venv, workdir / "venv", wheel, house)
    report = timed("run outside the repo", run_outside, python, workdir / "project")
    return {"report": report, "seconds": times, "wheel": wheel.name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/wheel_check.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true",
                        help="only build the wheelhouse of the dependencies (needs the package "
                             "index once; offline afterwards), e.g. from scripts/setup.sh")
    parser.add_argument("--keep", metavar="DIR",
                        help="work in DIR and keep it (venv, wheel, project, report.json); "
                             "default: a temporary directory removed at the end")
    args = parser.parse_args(argv)
    try:
        if args.prepare:
            print(wheelhouse())
            return 0
        if args.keep:
            result = check(Path(args.keep).resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="mc-wheel-check-") as tmp:
                result = check(Path(tmp))
    except CheckFailed as exc:
        print(f"wheel check: {exc}", file=sys.stderr)
        return 1
    columns = result["report"].get("columns", {})
    print(f"{result['wheel']}: columns {', '.join(columns)}; "
          + ", ".join(f"{k} {v}s" for k, v in result["seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
