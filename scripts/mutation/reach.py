"""The reach map: which suites tests execute each function of the mechanical scope, from one
instrumented run of the judging suites, so a mechanical mutant runs only the tests that reach
its function, the tests that killed that function's other mutants first.

Why: a mutant no test executes cannot be killed by any, and a survivor used to cost the whole
suite of its requirements (60-110 s each, most of a full run's time). mutmut selects tests by
coverage for the same reason; coverage.py would need starting in every reference process
(forked, spawned, in namespaces) and maps lines, not the scope's functions, so the scope's
functions are instrumented instead: a copy of the tree where each one's body begins with a call
to a probe that appends ``function<TAB>test`` once per process, reading the current test from
a file the pytest process rewrites at each test's start (``pytest_runtest_logstart``, before
its fixtures). A function reached outside any test (session set-up) counts as reached by every
test. A reached test is attributed at the time of the call, so a long-lived process's work is
counted for the test that was running.

The map is only as good as the run it came from: a path taken on some runs only (timing) can
be missed. ``check_kills`` lists the journal's kills by a test the map says does not reach the
function; the run prints them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mutation.mechanical import function_nodes

PROBE = "mc_mutation_reach_probe"
PLUGIN = "mc_mutation_reach_plugin"
OUTSIDE = "-"
"""The test name of a call made while no test ran (collection, session set-up)."""
FORMAT = 2
"""2: a test's requirements are every ID of its mc_req marks (1 kept only each mark's first, so
a test marked mc_req("CO-2", "CO-4") never judged a CO-4 mutant); a map of format 1 is made
again."""

_PROBE_SOURCE = '''"""Written by scripts/mutation/reach.py into an instrumented copy of the tree."""
import os

_DIR = {dir!r}
_CURRENT = _DIR + "/current"
_seen = set()
_cur = [None, {outside!r}]


def _test():
    try:
        st = os.stat(_CURRENT)
    except OSError:
        return {outside!r}
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    if _cur[0] != key:
        try:
            with open(_CURRENT, encoding="utf-8") as f:
                _cur[1] = f.read() or {outside!r}
        except OSError:
            return {outside!r}
        _cur[0] = key
    return _cur[1]


def hit(function):
    test = _test()
    if (function, test) in _seen:
        return
    _seen.add((function, test))
    fd = os.open(f"{{_DIR}}/hits-{{os.getpid()}}.tsv", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{{function}}\\t{{test}}\\n".encode())
    finally:
        os.close(fd)
'''

_PLUGIN_SOURCE = '''"""Written by scripts/mutation/reach.py: tells the probe which test runs, and which
requirements each test judges."""
import json
import os

_DIR = {dir!r}


def _publish(name):
    tmp = f"{{_DIR}}/current.{{os.getpid()}}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(name)
    os.replace(tmp, _DIR + "/current")


def pytest_runtest_logstart(nodeid, location):
    _publish(nodeid)


def pytest_runtest_setup(item):
    reqs = []  # every ID of every mark: mc_req("CO-10", "CO-9") judges both
    for m in item.iter_markers("mc_req"):
        reqs.extend(r for r in m.args if r not in reqs)
    with open(_DIR + "/tests.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({{"nodeid": item.nodeid, "requirements": reqs}}) + "\\n")


def pytest_sessionfinish(session):
    _publish({outside!r})
'''


class ReachError(RuntimeError):
    """The instrumented run failed or its map cannot be read; the message says which."""


def probe_line(func: ast.AST, lines: list[str]) -> tuple[int, str] | None:
    """(0-based index to insert before, indentation) for a probe call first in ``func``'s body
    (after its docstring); None when the body starts on the ``def`` line."""
    body = func.body
    first = body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        if len(body) > 1:
            first = body[1]
        else:
            indent = lines[first.lineno - 1][:first.col_offset]
            return (first.end_lineno, indent) if not indent.strip() else None
    indent = lines[first.lineno - 1][:first.col_offset]
    if first.lineno == func.lineno or indent.strip():
        return None
    return first.lineno - 1, indent


def instrument(base: Path, targets: Iterable[str], into: Path, reach_dir: Path
               ) -> tuple[Path, list[str]]:
    """A hard-linked copy of ``base`` whose target functions (``file::qualname``) call the
    probe first; returns it and the targets that could not be instrumented."""
    tree = into / "reach-tree"
    shutil.copytree(base, tree, copy_function=os.link)
    by_file: dict[str, list[str]] = {}
    for target in sorted(set(targets)):
        by_file.setdefault(target.split("::", 1)[0], []).append(target)
    skipped: list[str] = []
    for file, file_targets in by_file.items():
        text = (base / file).read_text("utf-8")
        lines = text.splitlines(keepends=True)
        nodes = function_nodes(ast.parse(text, file))
        inserts: list[tuple[int, str]] = []
        for target in file_targets:
            func = nodes.get(target.split("::", 1)[1])
            where = probe_line(func, [ln.rstrip("\n") for ln in lines]) if func else None
            if where is None:
                skipped.append(target)
                continue
            index, indent = where
            inserts.append((index, f"{indent}__import__({PROBE!r}).hit({target!r})\n"))
        for index, line in sorted(inserts, reverse=True):
            lines.insert(index, line)
        (tree / file).unlink()
        (tree / file).write_text("".join(lines), "utf-8")
    (tree / f"{PROBE}.py").write_text(
        _PROBE_SOURCE.format(dir=str(reach_dir), outside=OUTSIDE), "utf-8")
    (tree / f"{PLUGIN}.py").write_text(
        _PLUGIN_SOURCE.format(dir=str(reach_dir), outside=OUTSIDE), "utf-8")
    return tree, skipped


@dataclass
class ReachMap:
    """function -> the tests that executed it (in the run's order); ``everywhere``: functions
    executed outside any test, so no test can be left out."""

    key: str
    tests: dict[str, list[str]] = field(default_factory=dict)
    everywhere: set[str] = field(default_factory=set)
    requirements: dict[str, list[str]] = field(default_factory=dict)
    """nodeid -> the requirements it judges (``mc_req``), in the run's order."""
    instrumented: set[str] = field(default_factory=set)

    def selects(self, function: str) -> bool:
        """Whether the map can choose tests for ``function`` (instrumented, not everywhere)."""
        return function in self.instrumented and function not in self.everywhere

    def judging(self, function: str, requirements: Iterable[str]) -> list[str]:
        """The tests of ``requirements`` that reached ``function``, in the run's order."""
        wanted = set(requirements)
        order = {n: i for i, n in enumerate(self.requirements)}
        return sorted((n for n in self.tests.get(function, ())
                       if wanted & set(self.requirements.get(n, ()))),
                      key=lambda n: order.get(n, len(order)))

    def as_json(self) -> dict:
        return {"format": FORMAT, "key": self.key, "tests": self.tests,
                "everywhere": sorted(self.everywhere), "requirements": self.requirements,
                "instrumented": sorted(self.instrumented)}

    @classmethod
    def from_json(cls, doc: dict) -> ReachMap:
        if doc.get("format") != FORMAT:
            raise ReachError(f"reach map format {doc.get('format')!r}, expected {FORMAT}")
        return cls(doc["key"], {k: list(v) for k, v in doc["tests"].items()},
                   set(doc["everywhere"]), {k: list(v) for k, v in doc["requirements"].items()},
                   set(doc["instrumented"]))


def read_hits(reach_dir: Path, key: str, instrumented: Iterable[str]) -> ReachMap:
    out = ReachMap(key, instrumented=set(instrumented))
    for line in (reach_dir / "tests.jsonl").read_text("utf-8").splitlines():
        entry = json.loads(line)
        out.requirements.setdefault(entry["nodeid"], entry["requirements"])
    seen: dict[str, set[str]] = {}
    for path in sorted(reach_dir.glob("hits-*.tsv")):
        for line in path.read_text("utf-8", "replace").splitlines():
            function, _, test = line.partition("\t")
            if test == OUTSIDE:
                out.everywhere.add(function)
            elif test:
                seen.setdefault(function, set()).add(test)
    order = {n: i for i, n in enumerate(out.requirements)}
    out.tests = {f: sorted(t, key=lambda n: (order.get(n, len(order)), n))
                 for f, t in sorted(seen.items())}
    return out


def map_key(root: Path, files: Iterable[str], targets: Iterable[str], seed: int,
            args: list[str]) -> str:
    """What the map depends on: the tree's code and suites, the scope, the seed, the run."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name.startswith(("suites/", "reference_engine/", "pytest_mooncake/")):
            digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    digest.update("\0".join(sorted(targets)).encode())
    digest.update(f"\0{seed}\0{' '.join(args)}".encode())
    return digest.hexdigest()[:16]


def build(base: Path, targets: list[str], into: Path, key: str,
          run: Callable[[Path, list[str], Path], int | None], args: list[str]) -> ReachMap:
    """Instrument, run ``args`` (the judging suites) in the copy, read the hits. ``run(tree,
    argv_tail, log)`` runs pytest and returns its exit status (None: killed at a deadline)."""
    reach_dir = into / "reach"
    reach_dir.mkdir(parents=True, exist_ok=True)
    tree, skipped = instrument(base, targets, into, reach_dir)
    log = into / "reach-run.log"
    status = run(tree, ["-p", PLUGIN, *args], log)
    if status != 0:
        tail = log.read_text("utf-8", "replace")[-3000:] if log.exists() else ""
        raise ReachError(f"the instrumented run of the judging suites ended with "
                         f"{'a deadline kill' if status is None else f'exit {status}'}, so its "
                         f"map would leave tests out; its output ends:\n{tail}")
    if not (reach_dir / "tests.jsonl").exists():
        raise ReachError(f"the instrumented run ran no test (no {reach_dir / 'tests.jsonl'})")
    shutil.rmtree(tree, ignore_errors=True)
    return read_hits(reach_dir, key, set(targets) - set(skipped))


def load_or_build(path: Path, key: str, make: Callable[[], ReachMap],
                  say: Callable[[str], None]) -> ReachMap:
    """The map stored at ``path`` when its key matches, else a new one written there."""
    try:
        stored = ReachMap.from_json(json.loads(path.read_text("utf-8")))
        if stored.key == key:
            say(f"reach map {path}: reused (key {key})")
            return stored
        say(f"reach map {path}: made for another tree, seed or scope (key {stored.key}, now "
            f"{key}); made again")
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError, ReachError) as exc:
        say(f"reach map {path}: unreadable ({exc}); made again")
    made = make()
    path.write_text(json.dumps(made.as_json(), indent=1) + "\n", "utf-8")
    return made


def _unparametrized(nodeid: str) -> str:
    """A node id without its parameters: a kill judged before its test was parametrized
    stands for each of the test's cases."""
    return nodeid.split("[", 1)[0]


def order_killers_first(tests: list[str], killers: dict[str, int]) -> list[str]:
    """``tests`` with those that killed more of the function's other mutants first (stable)."""
    return sorted(tests, key=lambda n: -(killers.get(n, 0) or killers.get(_unparametrized(n), 0)))


def check_kills(reach: ReachMap, kills: Iterable[tuple[str, str, str]]) -> list[str]:
    """(mutant id, function, killing nodeid) whose killer the map says does not reach the
    function: where the map under-approximates (a path some runs take)."""
    out = []
    for mid, function, killer in kills:
        listed = reach.tests.get(function, ())
        if reach.selects(function) and "::" in killer and killer not in listed and not any(
                _unparametrized(t) == killer for t in listed):
            out.append(f"{mid}: killed by {killer}, which the reach map does not list for "
                       f"{function}")
    return out

