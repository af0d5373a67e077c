"""The README's Python examples run. A block that is a whole test file (it has ``def test_``)
runs in a fresh project on both reference profiles: the first must pass on ``reference`` and
FAIL on ``reference:legacy`` (what the README says it shows). The other blocks are fragments of a larger context (a chaos run inside a test, a
cluster file's Fleet); they must at least be valid Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
TESTS = [b for b in BLOCKS if re.search(r"^def test_", b, re.M)]


def test_the_readme_has_examples_and_the_first_is_a_test_file() -> None:
    assert len(BLOCKS) >= 5 and TESTS, f"{len(BLOCKS)} python blocks, {len(TESTS)} test files"
    assert BLOCKS.index(TESTS[0]) == 0, "the README's first python example is a test file"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_block_is_valid_python(index: int) -> None:
    compile(BLOCKS[index], f"README.md python block {index + 1}", "exec")


def test_the_first_example_passes_on_rfc_and_fails_on_legacy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_readme_example=TESTS[0])
    result = pytester.runpytest("--mc-matrix=reference-profiles", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_recovers[[]reference:legacy[]] _*",
                                 "*B to reach the new A*", "MR-16 *pass (1)*FAIL (1/1)*"])

