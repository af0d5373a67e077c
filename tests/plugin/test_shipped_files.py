"""The data files the package ships are found by name from any project (``schemas/shipped_files``):
a path wins, then the project's own ``fixtures/KIND/NAME.toml``, then the shipped file; a name
that is nowhere is an error listing where it looked and what is shipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.schemas.shipped_files import (
    NotShipped,
    find,
    shipped,
    shipped_dir,
    shipped_names,
)

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_files_live_in_the_package() -> None:
    package = ROOT / "pytest_mooncake" / "data"
    assert shipped_dir("skew") == package / "skew"
    assert {"reference-profiles", "release"} <= set(shipped_names("matrices"))
    assert {"rolling-upgrade", "mixed-engines", "master-client"} <= set(shipped_names("skew"))
    assert {"example", "nodes-example"} <= set(shipped_names("clusters"))
    assert {"reference", "mooncake"} <= set(shipped_names("verdicts"))
    assert {"mooncake-0.3.13.post1@ha-oplog", "reference-rfc@ha-oplog", "releases",
            "release"} <= set(shipped_names("expectations"))
    assert shipped("clusters", "example") == package / "clusters" / "example.toml"
    assert not list((ROOT / "fixtures").glob("skew/*.toml")), "skew matrices belong in the package"


def test_a_project_file_wins_over_the_shipped_one_and_a_path_over_both(tmp_path: Path) -> None:
    own = tmp_path / "fixtures" / "matrices" / "release.toml"
    own.parent.mkdir(parents=True)
    own.write_text('[[column]]\ntarget = "reference"\n')
    assert find("matrices", "release", [tmp_path]) == own
    assert find("matrices", "reference-profiles", [tmp_path]) == shipped_dir("matrices") / "reference-profiles.toml"
    assert find("matrices", "fixtures/matrices/release.toml", [tmp_path]) == own
    bare = tmp_path / "mine"
    bare.write_text("")
    assert find("clusters", str(bare)) == bare


def test_an_unknown_name_lists_where_it_looked_and_what_is_shipped(tmp_path: Path) -> None:
    with pytest.raises(NotShipped) as err:
        find("skew", "rolling-upgrad", [tmp_path])
    message = str(err.value)
    assert str(tmp_path / "fixtures" / "skew" / "rolling-upgrad.toml") in message
    assert "shipped version-skew matrices" in message and "rolling-upgrade" in message
    with pytest.raises(ValueError, match="unknown kind"):
        shipped_dir("pictures")


def test_shipped_names_work_from_a_project_that_is_not_this_repo(pytester: pytest.Pytester) -> None:
    """``--mc-matrix`` and ``cluster:`` by name from a fresh directory (no fixtures/ there)."""
    pytester.makepyfile("""
        import pytest
        @pytest.mark.mc_req("MR-8")
        def test_x(mc_target):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-matrix=reference-profiles", "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*reference*reference:legacy*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-matrix=no-such-matrix")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-matrix=no-such-matrix: no such file*shipped run matrices (--mc-matrix): "
                                 "backends, reference-profiles, release*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-target=cluster:example", "--co")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
