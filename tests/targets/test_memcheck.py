"""Engine memory errors under valgrind memcheck (memcheck.py): a real valgrind run of a small
program whose library, in a ``mooncake/`` directory like a build's, writes after free, and
whose main program (not the build's) reads after free."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_mooncake.runtime.native import compiler
from pytest_mooncake.targets.mooncake.memcheck import (
    MemcheckLauncher,
    engine_errors,
    error_counts,
    suppressions,
    valgrind_argv,
)

LIBRARY = r"""
#include <stdlib.h>
int engine_use_after_free(void) {
    int *p = malloc(64);
    free(p);
    p[3] = 7;              /* invalid write inside the "build" */
    return 0;
}
"""
PROGRAM = r"""
#include <stdlib.h>
int engine_use_after_free(void);
int main(void) {
    char *q = malloc(16);
    free(q);
    volatile char c = q[2];   /* invalid read in the program: not the build's */
    (void)c;
    return engine_use_after_free();
}
"""

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None,
                                reason="n/a: valgrind is not installed (Debian: valgrind)")


def build(tmp_path: Path) -> Path:
    cc = compiler()
    lib_dir = tmp_path / "site-packages" / "mooncake"
    lib_dir.mkdir(parents=True)
    (tmp_path / "bad.c").write_text(LIBRARY)
    (tmp_path / "main.c").write_text(PROGRAM)
    subprocess.run([cc, "-g", "-O0", "-shared", "-fPIC", "-o", lib_dir / "libbad.so",
                    tmp_path / "bad.c"], check=True, timeout=60)
    exe = tmp_path / "prog"
    subprocess.run([cc, "-g", "-O0", "-o", exe, tmp_path / "main.c", f"-L{lib_dir}", "-lbad",
                    f"-Wl,-rpath,{lib_dir}"], check=True, timeout=60)
    return exe


def test_an_invalid_write_in_the_build_is_found_with_its_stack(tmp_path):
    exe = build(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    supp = suppressions(reports / "s.supp")
    subprocess.run(valgrind_argv([str(exe)], reports, supp), check=False, timeout=120,
                   capture_output=True)
    counts = error_counts(reports)
    assert counts.get("InvalidRead", 0) >= 1 and counts.get("InvalidWrite", 0) >= 1, counts
    found = engine_errors(reports)
    assert [f.kind for f in found] == ["InvalidWrite"], found
    assert "engine_use_after_free" in found[0].stack[0], found[0]
    assert "/mooncake/libbad.so" in found[0].stack[0]


def test_the_launcher_wraps_only_engines(tmp_path):
    class Inner:
        started: list = []

        def start(self, name, argv, env, ready, ready_timeout, publish=()):
            self.started.append((list(argv), dict(env or {}), ready_timeout))

    inner = Inner()
    launcher = MemcheckLauncher(inner, tmp_path / "mc")
    launcher.start("e", ["python", "driver.py", "engine", "--x"], {"A": "1"}, None, 60)
    launcher.start("m", ["mooncake_master"], None, None, 60)
    (engine, env, timeout), (master, _, _) = inner.started
    assert engine[0] == "valgrind" and engine[-4:] == ["python", "driver.py", "engine", "--x"]
    assert env["PYTHONMALLOC"] == "malloc" and timeout >= 300
    assert master == ["mooncake_master"]
