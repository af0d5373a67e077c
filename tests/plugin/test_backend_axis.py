"""The backend axis: a matrix column deployed on its own metadata/HA backend is a column of its
own, and its tests get that backend's store."""

from __future__ import annotations

import pytest

from pytest_mooncake.schemas.run_matrix import RunMatrixFile
from pytest_mooncake.schemas.shipped_files import shipped_dir
from pytest_mooncake.schemas.toml_documents import SchemaError, load
from pytest_mooncake.targets import resolve_target


def test_a_column_on_other_backends_is_labelled_by_them() -> None:
    plain = resolve_target("reference:legacy")
    assert plain.label == "reference:legacy"
    assert plain.deployment_backends() == {"metadata": "etcd", "ha": "etcd"}
    on_redis = resolve_target("reference:legacy").with_backends(metadata="redis", ha=None)
    assert on_redis.label == "reference:legacy+metadata=redis"
    assert on_redis.plain_label == "reference:legacy"
    assert on_redis.deployment_backends() == {"metadata": "redis", "ha": "etcd"}


def test_the_shipped_backends_matrix_has_each_backend_of_each_judged_target() -> None:
    columns = load(RunMatrixFile, shipped_dir("matrices") / "backends.toml").column
    seen = {(c.target, c.metadata or "etcd") for c in columns}
    for target in ("reference", "reference:legacy", "mooncake==0.3.13.post1",
                   "mooncake==0.3.14"):
        assert {(target, b) for b in ("etcd", "redis", "http", "p2p")} <= seen, target
    assert any(c.ha == "redis" for c in columns)
    # the reference's masters run on Redis HA: both profiles get a column of their own
    assert {(c.target, c.ha) for c in columns if c.ha == "redis" and not c.metadata} == {
        ("reference", "redis"), ("reference:legacy", "redis")}


def test_a_bad_backend_in_a_matrix_names_the_field(tmp_path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[[column]]\ntarget = "reference"\nmetadata = "zookeeper"\n')
    with pytest.raises(SchemaError, match="metadata"):
        load(RunMatrixFile, path)


def test_matrix_columns_on_two_backends_each_get_their_store(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", m='[[column]]\ntarget = "reference"\n\n'
                                 '[[column]]\ntarget = "reference"\nmetadata = "redis"\n')
    pytester.makepyfile("""
        def test_store(mc_metadata, mc_target):
            print("COLUMN", mc_target.label, mc_metadata.kind, mc_metadata.uri.split(":")[0])
    """)
    result = pytester.runpytest_subprocess("-s", "--mc-matrix=m.toml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random(["*COLUMN reference etcd etcd*",
                                        "*COLUMN reference+metadata=redis redis redis*"])


def test_mc_metadata_takes_p2p_and_names_a_bad_choice(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_store(mc_metadata, mc_target):
            print("STORE", mc_target.deployment_backends()["metadata"], mc_metadata.kind,
                  mc_metadata.uri)
    """)
    result = pytester.runpytest_subprocess("-s", "--mc-metadata=p2p")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*STORE p2p p2p P2PHANDSHAKE*"])
    bad = pytester.runpytest_subprocess("--mc-metadata=p2phandshake")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--mc-metadata must be one of etcd, redis, http, http:reference, "
                              "p2p (got 'p2phandshake')*"])


def test_a_p2p_column_names_engines_by_address_and_has_no_store(
        pytester: pytest.Pytester) -> None:
    """Engines on a p2p column are reached by their logical names, publish under host:port,
    and a test that plants a value is n/a with the deployment's reason (not FAIL, not error)."""
    pytester.makefile(".toml", m='[[column]]\ntarget = "reference"\nmetadata = "p2p"\n')
    pytester.makepyfile("""
        import pytest

        @pytest.mark.mc_req("MR-9")
        def test_transfer(mc_engine):
            a, b = mc_engine("seg-a"), mc_engine("seg-b")
            assert b.write("seg-a", 0, b"p2p!").ok
            assert a.local_read(0, 4) == b"p2p!"
            assert a.descriptor()["name"] == a.segment_name != "seg-a"
            print("NAMED", a.segment, a.segment_name)

        @pytest.mark.mc_req("MR-3")
        def test_plant(mc_engine, mc_metadata):
            mc_engine("seg-a")
            mc_metadata.put(mc_metadata.segment_key("seg-a"), b"{}")
    """)
    result = pytester.runpytest_subprocess("-s", "--mc-matrix=m.toml", "-p", "no:randomly")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*NAMED seg-a 127.0.0.1:*",
                                 "*n/a MR-3 [[]reference+metadata=p2p[]]: reference+metadata=p2p "
                                 "is deployed on P2PHANDSHAKE metadata*planting a value*"])
