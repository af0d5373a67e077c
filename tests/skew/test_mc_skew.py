"""mc_skew: parametrization over a matrix's pairs, targets per role, usage errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_mooncake.skew import PROJECT_SKEW_DIR, SkewMatrixError, load_matrix

MATRIX = """
roles = ["writer", "reader"]
[implementations.reference]
[implementations."reference:legacy"]
target = "reference:legacy"
[[pairs]]
writer = "reference:legacy"
reader = "reference"
[[pairs]]
writer = "reference"
reader = "reference:legacy"
"""

SUITE = """
import pytest

@pytest.mark.mc_skew("upgrade")
def test_pair(mc_skew):
    writer, reader = mc_skew.target("writer"), mc_skew.target("reader")
    assert writer is mc_skew.target("writer")
    assert writer is not reader
    assert writer.label == mc_skew.implementation("writer").target
    assert reader.ctx.workdir.is_dir() and reader.ctx.workdir != writer.ctx.workdir
    print("PAIR", mc_skew.id, writer.label, reader.label)
"""


def _project(pytester: pytest.Pytester, matrix: str = MATRIX, name: str = "upgrade") -> None:
    skew = pytester.path / "fixtures" / "skew"
    skew.mkdir(parents=True)
    (skew / f"{name}.toml").write_text(textwrap.dedent(matrix))


def test_parametrized_over_pairs_with_ids_naming_them(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*test_pair[[]writer=reference:legacy-reader=reference[]] PASSED*",
        "*test_pair[[]writer=reference-reader=reference:legacy[]] PASSED*",
    ])
    shown = pytester.runpytest("-s", "-p", "no:cacheprovider").stdout.str()
    assert "PAIR writer=reference:legacy-reader=reference reference:legacy reference" in shown


def test_targets_are_closed_at_teardown(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makeconftest("""
        import pytest
        from pytest_mooncake.targets.reference import ReferenceTarget

        CLOSED = []
        original = ReferenceTarget.close

        def close(self):
            CLOSED.append(self.label)
            original(self)

        ReferenceTarget.close = close

        def pytest_sessionfinish(session):
            print("CLOSED", sorted(CLOSED))
    """)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "CLOSED ['reference', 'reference', 'reference:legacy', 'reference:legacy']" \
        in result.stdout.str()


def test_unknown_matrix_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_skew("no-such-matrix")
        def test_x(mc_skew):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*test_x*unknown skew matrix 'no-such-matrix'*no-such-matrix.toml*available: *upgrade*"])


@pytest.mark.parametrize(("broken", "field"), [
    (MATRIX.replace('reader = "reference"', 'reader = "nope"'), "pairs[[]0[]].reader"),
    (MATRIX.replace('target = "reference:legacy"', 'target = "no-such-target:x"'),
     "implementations.reference:legacy.target"),
    (MATRIX.replace('roles = ["writer", "reader"]', 'roles = []'), "roles"),
    (MATRIX.replace('writer = "reference:legacy"\n', ''), "pairs[[]0[]].writer"),
    ("colour = 'blue'\n" + MATRIX, "colour"),
    ("roles = [", ""),
])
def test_malformed_matrix_names_file_and_field(pytester: pytest.Pytester, broken: str,
                                               field: str) -> None:
    _project(pytester, broken)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    detail = f"field '{field}'" if field else "not valid TOML"
    result.stderr.fnmatch_lines([f"*fixtures/skew/upgrade.toml: {detail}*"])


def test_fixture_without_marker_and_marker_without_fixture(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile(test_nomark="""
        def test_x(mc_skew):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*mc_skew fixture needs @pytest.mark.mc_skew*"])
    pytester.makepyfile(test_nomark="""
        import pytest

        @pytest.mark.mc_skew("upgrade")
        def test_x():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*must request the mc_skew fixture*"])


def test_matrix_given_as_a_path_next_to_the_test(pytester: pytest.Pytester) -> None:
    (pytester.path / "mine.toml").write_text(MATRIX)
    pytester.makepyfile(SUITE.replace('"upgrade"', '"mine.toml"'))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_shipped_matrices_are_valid() -> None:
    shipped = sorted(PROJECT_SKEW_DIR.glob("*.toml"))
    assert shipped
    for path in shipped:
        matrix = load_matrix(path)
        assert matrix.pairs and path.read_text().startswith("#"), path
    upgrade = load_matrix(PROJECT_SKEW_DIR / "metadata-rolling-upgrade.toml")
    assert "writer=reference:legacy-reader=reference" in [p.id for p in upgrade.pairs]


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(SkewMatrixError, match="cannot read"):
        load_matrix(tmp_path / "absent.toml")
