"""mc_skew: parametrization over a matrix's pairs, targets per role, usage errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_mooncake.fixtures.version_skew import SkewMatrixError, load_matrix
from pytest_mooncake.schemas.shipped_files import shipped_dir

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
    # each pair's two role targets, and the session's target under test (mc_skew uses it)
    assert "CLOSED ['reference', 'reference', 'reference', 'reference:legacy', " \
        "'reference:legacy']" in result.stdout.str()


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
        "*test_x*unknown skew matrix 'no-such-matrix'*no-such-matrix.toml*shipped*: *rolling-upgrade*"])


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
    shipped = sorted(shipped_dir("skew").glob("*.toml"))
    assert shipped
    for path in shipped:
        matrix = load_matrix(path)
        assert matrix.pairs and path.read_text().startswith("#"), path
    upgrade = load_matrix(shipped_dir("skew") / "metadata-rolling-upgrade.toml")
    assert "writer=reference:legacy-reader=reference" in [p.id for p in upgrade.pairs]


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(SkewMatrixError, match="absent.toml: no such file"):
        load_matrix(tmp_path / "absent.toml")


def test_a_bad_reference_variant_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, MATRIX.replace('target = "reference:legacy"', 'target = "reference:legcy"'))
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*field 'implementations.reference:legacy.target'*unknown "
                                 "reference profile 'legcy'*"])


EXTERNAL = """
roles = ["master", "client"]
[implementations.target]
target = "@target"
[implementations.absent]
target = "mooncake:/nonexistent/mooncake-install"
[[pairs]]
master = "target"
client = "absent"
"""


def test_an_external_target_that_is_not_available_makes_the_pair_na(
        pytester: pytest.Pytester) -> None:
    _project(pytester, EXTERNAL, name="external")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_skew("external")
        def test_pair(mc_skew):
            assert mc_skew.target("master").label == "reference"
            mc_skew.target("client")
    """)
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*n/a: skew role client (absent: mooncake:/nonexistent/mooncake-install) is not "
        "available here: *is not a directory*"])


def test_require_names_the_role_and_the_targets_reason(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_skew("upgrade")
        def test_pair(mc_skew):
            assert mc_skew.require("writer", "engine", "master_cluster")
            mc_skew.require("reader", "version_skew")
    """)
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([
        "*n/a: skew role reader (reference*): the reference engine does not implement "
        "version_skew yet*"])


def test_master_clusters_and_store_clients_of_a_role_are_closed_and_logged(
        pytester: pytest.Pytester) -> None:
    _project(pytester, MATRIX.replace('[[pairs]]\nwriter = "reference"\nreader = "reference:legacy"\n',
                                      ''))
    pytester.makepyfile("""
        import pytest

        SEEN = {}

        @pytest.mark.mc_skew("upgrade")
        def test_pair(mc_skew):
            cluster = mc_skew.target("writer").master_cluster(masters=1, clients=0)
            client = mc_skew.target("reader").store_client(cluster.endpoint(), client_id="c1")
            assert client.put("k", 64)["ok"] and client.exists("k")["result"]["exists"]
            SEEN["processes"] = [cluster.masters[0].process, client.process]
            assert False, "show the logs"

        def test_after():
            assert SEEN["processes"] and not any(p.alive() for p in SEEN["processes"])
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "master cluster logs (writer: reference:legacy)" in out
    assert "store client c1 log (reader: reference)" in out
    assert "client c1 attached to" in out


def test_mixed_engine_pairs_without_a_wheel_are_na_naming_the_role(pytester: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    """The shipped compat suite and matrices with a target under test that is an empty install
    directory (what a machine without the wheel looks like): the mixed-engines pairs (roles
    following the column) are n/a naming the role, never an error; the pairs of two releases
    judge no column of this run and are not run."""
    suite = Path(__file__).resolve().parents[2] / "suites" / "compat" / "test_mixed_engines.py"
    empty = tmp_path / "no-mooncake-here"
    empty.mkdir()
    pytester.makepyfile(test_mixed=suite.read_text())
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider", f"--mc-target=mooncake:{empty}")
    result.assert_outcomes(skipped=4, deselected=14)  # on etcd and on P2P handshake
    result.stdout.fnmatch_lines([
        f"*n/a: skew role writer (the target under test): Mooncake is not installed in "
        f"{empty}*",
        f"*n/a: skew role reader (the target under test): Mooncake is not installed in "
        f"{empty}*"])


def test_under_a_matrix_at_target_is_each_columns_target(pytester: pytest.Pytester) -> None:
    """A skew test runs once per --mc-matrix column, and "@target" is that column's target
    (not the first column's): otherwise a legacy column is judged on the rfc build."""
    _project(pytester, """
        roles = ["old", "new"]
        [implementations."reference:legacy"]
        target = "reference:legacy"
        [implementations.target]
        target = "@target"
        [[pairs]]
        old = "reference:legacy"
        new = "target"
    """)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_req("MR-17")
        @pytest.mark.mc_skew("upgrade")
        def test_pair(mc_skew):
            print("NEW", mc_skew.target("new").label)
    """)
    pytester.makefile(".toml", columns='[[column]]\ntarget = "reference"\n\n'
                                       '[[column]]\ntarget = "reference:legacy"\n')
    result = pytester.runpytest("-s", "-v", "-p", "no:cacheprovider",
                                "--mc-matrix=columns.toml", "--mc-report=r.json")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "NEW reference\n" in out and "NEW reference:legacy\n" in out, out
    doc = json.loads((pytester.path / "r.json").read_text())
    for column in ("reference", "reference:legacy"):
        assert doc["columns"][column]["requirements"]["MR-17"]["verdict"] == "pass", column


PAIR_SUITE = """
import pytest

@pytest.mark.mc_req("MR-17")
@pytest.mark.mc_skew("upgrade")
def test_rollout(mc_skew):
    assert mc_skew.implementation("writer").target == "reference", "old writer breaks it"

@pytest.mark.mc_req("MR-17")
def test_plain():
    pass
"""
OLD_WRITER = "writer=reference:legacy-reader=reference"
NEW_WRITER = "writer=reference-reader=reference:legacy"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_each_pair_has_its_own_cell_in_the_matrix(pytester: pytest.Pytester, workers) -> None:
    """Which pair of a rollout breaks a requirement, not only whether one did; serial and
    xdist runs print the same."""
    _project(pytester)
    pytester.makepyfile(PAIR_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--mc-report=r.json", *workers)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "MR-17 * FAIL (1/3)*",
        "requirement  version-skew pair*reference*",
        f"MR-17        {NEW_WRITER}  *pass (1)*",
        f"MR-17        {OLD_WRITER}  FAIL (1/1)*",
    ])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["requirements"]["MR-17"]["verdict"] == "FAIL"
    pairs = doc["pairs"]
    assert list(pairs) == sorted([OLD_WRITER, NEW_WRITER])
    assert pairs[OLD_WRITER]["requirements"]["MR-17"]["verdict"] == "FAIL"
    assert pairs[NEW_WRITER]["requirements"]["MR-17"]["verdict"] == "pass"
    assert [t["nodeid"] for t in pairs[NEW_WRITER]["requirements"]["MR-17"]["tests"]] == [
        f"test_each_pair_has_its_own_cell_in_the_matrix.py::test_rollout[{NEW_WRITER}]"]


def test_no_pair_table_without_skew_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_req("MR-17")
        def test_plain():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-report=r.json")
    result.assert_outcomes(passed=1)
    assert "version-skew pair" not in result.stdout.str()
    assert "pairs" not in json.loads((pytester.path / "r.json").read_text())


def test_a_pair_without_the_target_counts_only_in_its_own_row(pytester: pytest.Pytester) -> None:
    """A pair of two other builds (mixed-engines' mooncake/reference) says nothing about the
    target under test: its failure is in the pair's row, never in the target's column."""
    _project(pytester, """
        roles = ["old", "new"]
        [implementations."reference:legacy"]
        target = "reference:legacy"
        [implementations.target]
        target = "@target"
        [[pairs]]
        old = "reference:legacy"
        new = "target"
        [[pairs]]
        old = "reference:legacy"
        new = "reference:legacy"
    """)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_req("MR-17")
        @pytest.mark.mc_skew("upgrade")
        def test_pair(mc_skew):
            assert mc_skew.target("new").label != "reference:legacy", "legacy on both sides"
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["requirements"]["MR-17"]["verdict"] == "pass", doc["requirements"]["MR-17"]
    pairs = doc["pairs"]
    assert pairs["old=reference:legacy-new=reference:legacy"]["requirements"]["MR-17"][
        "verdict"] == "FAIL"
    assert pairs["old=reference:legacy-new=target"]["requirements"]["MR-17"]["verdict"] == "pass"
