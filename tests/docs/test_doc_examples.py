"""Every example in docs/ and README.md runs, or says that it does not and still parses.

Shell blocks run with bash in the repository with this interpreter first on PATH; Python
blocks run as scripts there, or, when they are a whole test file, under pytest on the
reference target. The getting-started example must also FAIL on ``reference:legacy``, which
is what the page says it shows. Test files run in a pytest subprocess: two in-process runs in
one worker re-import ``requests`` under the first run's cookie classes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from doc_examples import ROOT, Example, all_examples, problem

EXAMPLES = all_examples()
DOCS = [e for e in EXAMPLES if e.page != "README.md"]
"""The README's examples are docs examples too (checked below), so they run once, there."""
RUNNABLE = [e for e in DOCS if e.runs]
PARSED_ONLY = [e for e in DOCS if not e.runs and e.lang in ("bash", "python")]
DEADLINE_S = 180


def environment(tmp: Path) -> dict[str, str]:
    """This interpreter first on PATH; temporary files (``mktemp``) under the test's own
    directory, which pytest removes."""
    return {**os.environ, "TMPDIR": str(tmp),
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run(argv: list[str], example: Example, tmp: Path) -> None:
    done = subprocess.run(argv, cwd=ROOT, env=environment(tmp), capture_output=True, text=True,
                          timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (f"{example.id} exited {done.returncode}:\n{example.body}\n"
                                  f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")


def test_the_docs_have_runnable_examples_of_both_kinds() -> None:
    kinds = {(e.lang, e.is_test_file) for e in RUNNABLE}
    assert {("bash", False), ("python", False), ("python", True)} <= kinds, kinds


def test_every_fence_says_whether_it_runs() -> None:
    problems = [p for p in map(problem, EXAMPLES) if p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("example", RUNNABLE, ids=lambda e: e.id)
def test_example_runs(example: Example, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if example.lang == "bash":
        # a short TMPDIR: an example's mktemp dir may hold unix sockets (108-byte paths), and
        # tmp_path grows with pytest's run counter and the example's id
        with tempfile.TemporaryDirectory(prefix="mc-doc-", dir="/tmp") as short:
            run(["bash", "-euo", "pipefail", "-c", example.body], example, Path(short))
    elif example.is_test_file:
        pytester = request.getfixturevalue("pytester")  # only here: it moves HOME and the cwd
        pytester.makepyfile(test_doc_example=example.body)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=DEADLINE_S)
        outcomes = result.parseoutcomes()
        assert outcomes.get("passed", 0) >= 1 and not {"failed", "error", "errors"} & set(outcomes), \
            f"{example.id} on the reference target: {outcomes}\n{result.stdout.str()[-3000:]}"
    else:
        script = tmp_path / "example.py"
        script.write_text(example.body)
        run([sys.executable, str(script)], example, tmp_path)


@pytest.mark.parametrize("example", PARSED_ONLY, ids=lambda e: e.id)
def test_example_not_run_still_parses(example: Example, tmp_path: Path) -> None:
    if example.lang == "python":
        compile(example.body, example.id, "exec")
    else:
        run(["bash", "-n", "-c", example.body], example, tmp_path)


def test_the_getting_started_example_fails_on_legacy(pytester: pytest.Pytester) -> None:
    """The page says B keeps the dead A's descriptor under the pre-RFC behaviour."""
    first = next(e for e in RUNNABLE if e.page == "docs/getting-started.md" and e.is_test_file)
    pytester.makepyfile(test_doc_example=first.body)
    result = pytester.runpytest_subprocess("--mc-target=reference:legacy", "-p", "no:cacheprovider",
                                           timeout=DEADLINE_S)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*B to reach the new A*", "MR-16 *FAIL (1/1)*"])


def test_readme_examples_are_docs_examples() -> None:
    """The README runs nothing itself: each of its code examples is one the docs run."""
    docs = {e.body for e in DOCS}
    readme = [e for e in EXAMPLES if e.page == "README.md" and e.lang in ("bash", "python")]
    assert readme, "the README shows no example"
    missing = [e.id for e in readme if e.body not in docs]
    assert not missing, f"README examples not on a docs page (where they would run): {missing}"
