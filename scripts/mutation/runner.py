"""Running one mutant: a hard-linked scratch copy of the repository with the patch applied, the
suites of its requirements and then its project tests in child pytest runs with a deadline, and
the verdict (killed by which test, a hang, or survived)."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mutation.catalogue import CatalogueError, Mutant, mutated_sources
from mutation.reach import ReachMap, build, check_kills, load_or_build, map_key, order_killers_first

try:
    from pytest_mooncake.runtime.die_with_parent import wrap
except ImportError:  # run by an interpreter without the package: the repository's own copy
    import sys

    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))
    from pytest_mooncake.runtime.die_with_parent import wrap

KILLED, HANG, SURVIVED, ERROR = "killed", "killed (hang)", "SURVIVED", "ERROR"
TAIL = 3000


def tracked_files(root: Path) -> list[str]:
    """Files of the working tree a run needs: git's tracked and untracked-but-not-ignored."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(root)) for p in root.rglob("*")
                 if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts]
    return [n for n in names if (root / n).is_file()]


def make_base(root: Path, into: Path) -> Path:
    base = into / "base"
    for name in tracked_files(root):
        dest = base / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest)
    return base


def make_scratch(base: Path, m: Mutant, into: Path) -> Path:
    """A hard-linked copy of ``base`` with the mutant's files replaced (never written through)."""
    work = into / m.id
    shutil.copytree(base, work, copy_function=os.link)
    for file, text in mutated_sources(m, lambda f: (base / f).read_text("utf-8")).items():
        (work / file).unlink()
        (work / file).write_text(text, "utf-8")
    return work


# ---------------------------------------------------------------------------------- runs


@dataclass
class Result:
    id: str
    requirements: list[str]
    kind: str
    status: str
    killed_by: str | None = None
    phase: str | None = None
    """``suites`` or ``tests``: which run killed it."""
    seconds: float = 0.0
    detail: str = ""
    confirmed: bool | None = None
    """With ``--confirm``: whether the killing test passes on the unmutated tree."""
    tests_run: int | None = None
    """With a reach map: how many suites tests were chosen for it (None: the whole suites)."""

    @property
    def killed(self) -> bool:
        return self.status in (KILLED, HANG)


class BaselineFailed(RuntimeError):
    """The suites or tests fail on the unmutated tree; the message says which and why."""


@dataclass
class Config:
    python: str
    seed: int
    deadline: float
    suites_only: bool = False
    confirm: bool = False
    keep: Path | None = None
    baseline: bool = True
    baseline_deadline: float = 1800.0
    extra_env: dict[str, str] = field(default_factory=dict)
    reach: Path | None = None
    """Where the reach map is kept (``--reach``): mechanical mutants then run only the suites
    tests that execute their function, their function's killers first (``mutation.reach``)."""
    scope: dict[str, list[str]] = field(default_factory=dict)
    """requirement -> the mechanical scope's functions (what the reach map instruments)."""


class Runner:
    """Runs mutants in scratch copies; ``stop()`` ends every run in progress (Ctrl-C)."""

    def __init__(self, cfg: Config, base: Path, scratch: Path):
        self.cfg = cfg
        self.base = base
        self.scratch = scratch
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self.reach: ReachMap | None = None
        self.killers: dict[str, dict[str, int]] = {}
        """function -> killing test -> how many of its mutants that test killed."""

    def env(self, tree: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.cfg.extra_env)
        env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"]
                                         if env.get("PYTHONPATH") else "")
        return env

    def verify_imports(self, packages: list[str]) -> None:
        """The packages the mutants patch must be imported from the scratch tree, not from an
        installed copy (an editable install, a site-packages wheel): else nothing is tested."""
        code = ("import importlib, os, sys\n"
                "for name in sys.argv[1:]:\n"
                "    print(os.path.dirname(importlib.import_module(name).__file__))")
        out = subprocess.run([self.cfg.python, "-c", code, *packages], cwd=self.base,
                             env=self.env(self.base), capture_output=True, text=True, timeout=120)
        dirs = out.stdout.split()
        if out.returncode != 0 or len(dirs) != len(packages) or not all(
                Path(d).resolve().is_relative_to(self.base.resolve()) for d in dirs):
            raise SystemExit(f"mutants: {self.cfg.python} imports {packages} from {dirs} instead "
                             f"of the scratch tree {self.base} ({out.stderr.strip()[-500:]}); a "
                             f"mutant would not be tested. Is PYTHONPATH honoured?")

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
        for p in procs:
            _kill_group(p)

    def _pytest(self, tree: Path, args: list[str], junit: Path, deadline: float,
                log: Path) -> tuple[int | None, float]:
        """Exit status (None on a deadline kill) and seconds."""
        argv = [self.cfg.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                f"--junitxml={junit}", "-o", "junit_family=xunit2", *args]
        start = time.monotonic()
        with open(log, "ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            with self._lock:
                if self._stopping:
                    return None, 0.0
                # through die_with_parent: a killed mutants.py (even SIGKILL) takes its pytest
                # runs with it, and they take their etcd and engines (the plugin's own rule)
                proc = subprocess.Popen(wrap(argv), cwd=tree, env=self.env(tree), stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                self._procs.add(proc)
            try:
                rc = proc.wait(timeout=max(1.0, deadline))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc = None
            finally:
                _kill_group(proc)
                with self._lock:
                    self._procs.discard(proc)
        return rc, time.monotonic() - start

    def suites_args(self, m: Mutant, selected: list[str] | None = None) -> list[str]:
        # --mc-confirm=0: the first failure kills (-x); the plugin's re-runs of it (two more
        # sessions per kill by default) would only confirm what --confirm checks on its own
        return ["-p", "pytest_mooncake", *(selected or m.suites),
                f"--mc-only={','.join(m.requirements)}", f"--mc-seed={self.cfg.seed}",
                "--mc-confirm=0"]

    def selected_tests(self, m: Mutant) -> list[str] | None:
        """The suites tests the reach map chooses for ``m``, killers first; None: the whole
        suites (no map, a curated mutant, a function the map cannot select for)."""
        if self.reach is None or not m.function or not self.reach.selects(m.function):
            return None
        with self._lock:
            killers = dict(self.killers.get(m.function, {}))
        return order_killers_first(self.reach.judging(m.function, m.requirements), killers)

    def note_kill(self, function: str, killer: str | None) -> None:
        if function and killer and "::" in killer:
            with self._lock:
                counts = self.killers.setdefault(function, {})
                counts[killer] = counts.get(killer, 0) + 1

    def use_reach(self, say: Callable[[str], None] = print) -> None:
        """Load the reach map at ``cfg.reach``, or make it with one instrumented run of the
        suites of every requirement the mechanical scope maps."""
        scope = self.cfg.scope
        targets = sorted({t for ts in scope.values() for t in ts})
        reqs = sorted(scope, key=lambda r: (r.split("-")[0], int(r.split("-")[-1])
                                            if r.split("-")[-1].isdigit() else 0))
        args = ["-p", "pytest_mooncake", "suites/", f"--mc-only={','.join(reqs)}",
                f"--mc-seed={self.cfg.seed}", "--mc-confirm=0"]
        names = [str(p.relative_to(self.base)) for p in self.base.rglob("*") if p.is_file()]
        key = map_key(self.base, names, targets, self.cfg.seed, args)

        def make() -> ReachMap:
            say(f"reach map: one instrumented run of the suites of {len(reqs)} requirements "
                f"over {len(targets)} functions ...")
            started = time.monotonic()

            def run(tree: Path, tail: list[str], log: Path) -> int | None:
                rc, _ = self._pytest(tree, tail, self.scratch / "reach.xml",
                                     self.cfg.baseline_deadline, log)
                return rc

            made = build(self.base, targets, self.scratch, key, run, args)
            say(f"reach map: {len(made.requirements)} tests, {len(made.tests)} of "
                f"{len(made.instrumented)} instrumented functions reached by a test, "
                f"{len(made.everywhere)} outside any test ({time.monotonic() - started:.0f}s)")
            return made

        self.reach = load_or_build(self.cfg.reach, key, make, say)

    def baseline(self, chosen: list[Mutant]) -> None:
        """Run what will judge the mutants on the unmutated tree first: a test that fails
        there would "kill" every mutant it judges (an interpreter without the project's
        dependencies once made 63 of 87 kills meaningless), so any failure stops the run."""
        reqs = sorted({r for m in chosen for r in m.requirements})
        suites = sorted({s for m in chosen for s in m.suites})
        runs = [("suites", ["-p", "pytest_mooncake", *suites, f"--mc-only={','.join(reqs)}",
                            f"--mc-seed={self.cfg.seed}", "--mc-confirm=0"])]
        tests = sorted({t for m in chosen for t in m.tests})
        if tests and not self.cfg.suites_only:
            runs.append(("tests", tests))
        for phase, args in runs:
            log = self.scratch / f"baseline-{phase}.log"
            junit = self.scratch / f"baseline-{phase}.xml"
            started = time.monotonic()
            rc, _ = self._pytest(self.base, args, junit, self.cfg.baseline_deadline, log)
            verdict = judge(rc, junit, self.cfg.baseline_deadline)
            print(f"baseline: the {phase} that judge these mutants, on the unmutated tree: "
                  f"{'pass' if verdict is None else verdict[0]} "
                  f"({time.monotonic() - started:.0f}s)", flush=True)
            if verdict is not None:
                status, killer, detail = verdict
                raise BaselineFailed(
                    f"the {phase} fail without any mutant ({status}"
                    + (f": {killer}" if killer else "") + (f"; {detail}" if detail else "")
                    + f"), so no kill would mean anything. Is {self.cfg.python} the project's "
                    f"interpreter (--python; scripts/setup.sh makes .venv)? Last lines of the "
                    f"run:\n{_tail(log)}")

    def run(self, m: Mutant) -> Result:
        res = Result(m.id, list(m.requirements), m.kind, SURVIVED)
        selected = self.selected_tests(m)
        if selected is not None:
            res.tests_run = len(selected)
            if not selected:
                res.detail = (f"no test of {', '.join(m.requirements)} executes {m.function} "
                              f"in the reach map's run (seed {self.cfg.seed}), so none can "
                              f"kill it: a test of the requirement that reaches it is missing")
                return res
        started = time.monotonic()
        try:
            tree = make_scratch(self.base, m, self.scratch)
        except (CatalogueError, OSError) as exc:
            res.status, res.detail = ERROR, str(exc)
            return res
        log = tree / "mutant-run.log"
        budget = m.deadline or self.cfg.deadline
        phases = [("suites", self.suites_args(m, selected))]
        if m.tests and not self.cfg.suites_only:
            phases.append(("tests", list(m.tests)))
        try:
            for phase, args in phases:
                left = budget - (time.monotonic() - started)
                junit = tree / f"junit-{phase}.xml"
                rc, _ = self._pytest(tree, args, junit, left, log)
                verdict = judge(rc, junit, budget)
                if verdict is None:
                    continue
                res.status, res.killed_by, res.detail = verdict
                res.phase = phase
                if phase == "suites":
                    self.note_kill(m.function, res.killed_by)
                break
            if res.status == KILLED and self.cfg.confirm and res.killed_by and "::" in res.killed_by:
                res.confirmed = self.confirm(res.killed_by, res.phase)
        finally:
            res.seconds = round(time.monotonic() - started, 1)
            if res.status in (ERROR,) or res.status == SURVIVED or self.cfg.keep:
                res.detail = (res.detail + "\n" + _tail(log)).strip()
            if self.cfg.keep:
                dest = self.cfg.keep / m.id
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(tree, dest, symlinks=True)
            shutil.rmtree(tree, ignore_errors=True)
        return res

    def confirm(self, nodeid: str, phase: str | None) -> bool:
        """Does the killing test pass on the unmutated tree? (A flaky test kills nothing.)"""
        junit = self.scratch / f"confirm-{time.monotonic_ns()}.xml"
        log = self.scratch / "confirm.log"
        args = [nodeid] if phase == "tests" else ["-p", "pytest_mooncake", nodeid,
                                                  f"--mc-seed={self.cfg.seed}"]
        rc, _ = self._pytest(self.base, args, junit, self.cfg.deadline, log)
        return rc == 0


def judge(rc: int | None, junit: Path, budget: float) -> tuple[str, str | None, str] | None:
    """(status, killer, detail) of one pytest run, or None when every selected test passed."""
    if rc is None:
        return HANG, None, f"no end within the deadline of {budget:.0f}s: a hang is a kill"
    if rc == 0:
        return None
    if rc in (1, 2):
        killer = first_failure(junit)
        if killer is None:
            return KILLED, f"pytest exit {rc}", "no failing test named in the report"
        return KILLED, killer, ""
    if rc == 5:
        return ERROR, None, "no test selected: the mutant's requirement or test paths are wrong"
    return ERROR, None, f"pytest exit {rc} (internal or usage error)"


def first_failure(junit: Path) -> str | None:
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return None
    for case in tree.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            return nodeid(case.get("classname", ""), case.get("name", ""))
    return None


def nodeid(classname: str, name: str) -> str:
    """A pytest node id from junit's dotted classname (``suites.metadata.test_cache``)."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_") or parts[i - 1] == "conftest":
            module = "/".join(parts[:i]) + ".py"
            return "::".join([module, *parts[i:], name])
    return f"{classname}::{name}" if classname else name


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace")[-TAIL:]
    except OSError:
        return ""


def run_all(chosen: list[Mutant], cfg: Config, root: Path, jobs: int,
            on_result: Callable[[Result], None] | None = None,
            prior: list[tuple[str, str, str]] = ()) -> list[Result]:
    """Judge ``chosen``; ``on_result`` sees each result as it comes (a journal). ``prior``:
    (mutant id, function, killing test) of kills judged before (a journal's), which order the
    tests of a reach map killers first and check the map."""
    scratch = Path(tempfile.mkdtemp(prefix="mc-mutants-"))
    runner: Runner | None = None
    try:
        base = make_base(root, scratch)
        runner = Runner(cfg, base, scratch)
        runner.verify_imports(sorted({f.split("/", 1)[0] for m in chosen for f in m.files
                                      if "/" in f}))
        if cfg.baseline:
            runner.baseline(chosen)
        if cfg.reach is not None:
            runner.use_reach()
            for _, function, killer in prior:
                runner.note_kill(function, killer)
            missed = check_kills(runner.reach, prior)
            for line in missed:
                print(f"reach map misses a kill: {line}", flush=True)
        results: dict[str, Result] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(runner.run, m): m for m in chosen}
            try:
                for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                    r = fut.result()
                    results[r.id] = r
                    if on_result is not None:
                        on_result(r)
                    print(f"[{n}/{len(chosen)}] {r.id}: {r.status}"
                          + (f" by {r.killed_by}" if r.killed_by else "")
                          + f" ({r.seconds:.0f}s"
                          + (f", {r.tests_run} tests" if r.tests_run is not None else "")
                          + ")", flush=True)
            except KeyboardInterrupt:
                runner.stop()
                for f in futures:
                    f.cancel()
                raise
        return [results[m.id] for m in chosen]
    finally:
        if runner is not None:
            runner.stop()
        shutil.rmtree(scratch, ignore_errors=True)
