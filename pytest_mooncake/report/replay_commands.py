"""The pytest command lines that run failed tests again: a re-run of ``--mc-confirm`` and the
replay command a report prints (the same arguments, one test, one seed).

Both are the run's own command line (``invocation_params``) without the paths it was given
(the tests to run are named instead, relative to where pytest was started) and without the
outputs of the run (its JSON report, JUnit XML, Allure directory, base temp directory), which a
re-run must not overwrite; the seed and the re-run bound are set explicitly. A replay also
drops the xdist options (one test needs no workers).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

OUTPUTS = ("--mc-seed", "--mc-confirm", "--mc-report", "--mc-fail-on", "--junitxml",
           "--junit-xml", "--alluredir", "--basetemp")
"""Options (each taking a value) a re-run sets itself."""
PARALLEL = ("-n", "--numprocesses", "--maxprocesses", "--dist")
"""xdist's options (each taking a value): kept by a re-run, dropped from a replay."""


def without_options(args: Sequence[str], names: Sequence[str]) -> list[str]:
    """``args`` without the options ``names`` and their values (``--opt value``,
    ``--opt=value``, and for one-letter ones ``-nVALUE``)."""
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        if arg in names:
            skip_value = True
            continue
        if any(arg.startswith(name + "=") or (len(name) == 2 and arg.startswith(name)
                                              and not arg.startswith("--"))
               for name in names):
            continue
        out.append(arg)
    return out


def without_paths(args: Sequence[str], paths: Sequence[str]) -> list[str]:
    """``args`` without the positional ``paths`` pytest parsed out of them (the last
    occurrence of each, where positional arguments stand)."""
    out = list(args)
    for path in paths:
        for i in range(len(out) - 1, -1, -1):
            if out[i] == path:
                del out[i]
                break
    return out


@dataclass(frozen=True)
class PytestCommand:
    """The run's command line, ready to run or print for other tests and seeds."""

    args: tuple[str, ...]
    """The run's arguments without its paths and outputs."""
    rootdir: Path
    invocation_dir: Path

    @classmethod
    def of(cls, config: pytest.Config) -> PytestCommand:
        params = config.invocation_params
        paths = [str(p) for p in (config.getoption("file_or_dir", None) or [])]
        args = without_options(without_paths(params.args, paths), OUTPUTS)
        return cls(tuple(args), Path(config.rootpath), Path(params.dir))

    def path_of(self, nodeid: str) -> str:
        """``nodeid`` (relative to the rootdir) as an argument given where pytest was started."""
        path, sep, rest = nodeid.partition("::")
        relative = os.path.relpath(self.rootdir / path, self.invocation_dir)
        return relative + sep + rest

    def replay(self, seed: int, nodeid: str) -> str:
        """The command, as a user types it, that runs ``nodeid`` once with session seed
        ``seed`` (no re-runs, no workers)."""
        args = [*without_options(self.args, PARALLEL), f"--mc-seed={seed}", "--mc-confirm=0",
                self.path_of(nodeid)]
        return "python -m pytest " + shlex.join(args)

    def rerun_argv(self, seed: int, nodeids: Sequence[str],
                   outputs: Mapping[str, str]) -> list[str]:
        """The argv of a re-run of ``nodeids`` with session seed ``seed``, without re-runs of its
        own, in the run's rootdir (so its nodeids are the run's, whatever paths it is given);
        ``outputs``: the option (``--mc-report``, ``--basetemp``, ...) -> where the re-run
        writes it instead of the run's own file."""
        return [sys.executable, "-m", "pytest", *self.args, f"--rootdir={self.rootdir}",
                f"--mc-seed={seed}", "--mc-confirm=0", "--mc-fail-on=never",
                *(f"{option}={value}" for option, value in outputs.items()),
                *(self.path_of(n) for n in nodeids)]
