"""The TOML files' schemas: every shipped file is valid, and every kind of mistake is one error
that names the file, the field (in the file's own keys) and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.schemas.cluster_manifest import ClusterFile
from pytest_mooncake.schemas.expectation_file import ExpectationFile
from pytest_mooncake.schemas.run_matrix import RunMatrixFile
from pytest_mooncake.schemas.skew_matrix import SkewMatrixFile
from pytest_mooncake.schemas.toml_documents import SchemaError, load

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "pytest_mooncake" / "data"
SHIPPED = [(SkewMatrixFile, p) for p in sorted((DATA / "skew").glob("*.toml"))] + \
    [(RunMatrixFile, p) for p in sorted((DATA / "matrices").glob("*.toml"))] + \
    [(ClusterFile, p) for p in sorted((DATA / "clusters").glob("*.toml"))] + \
    [(ExpectationFile, p) for p in sorted((DATA / "expectations").glob("*.toml"))]

SKEW = """
roles = ["writer", "reader"]
[implementations.old]
target = "reference:legacy"
[implementations.new]
[[pairs]]
writer = "old"
reader = "new"
"""


@pytest.mark.parametrize(("model", "path"), SHIPPED, ids=[p.name for _, p in SHIPPED])
def test_every_shipped_file_is_valid(model, path: Path) -> None:
    load(model, path)


def _error(tmp_path: Path, model, text: str) -> str:
    path = tmp_path / "f.toml"
    path.write_text(text)
    with pytest.raises(SchemaError) as err:
        load(model, path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    return message.removeprefix(f"{path}: ")


@pytest.mark.parametrize(("text", "expected"), [
    ("colour = 'blue'\n" + SKEW,
     "field 'colour': unknown field (known: description, implementations, judged, pairs, roles)"),
    (SKEW.replace("[implementations.new]", "[implementations.new]\nversion = 2"),
     "field 'implementations.new.version': unknown field (known: description, target)"),
    (SKEW.replace('roles = ["writer", "reader"]', "roles = []"), "field 'roles': must not be empty"),
    (SKEW.replace('roles = ["writer", "reader"]', 'roles = ["writer", "read-er"]'),
     "field 'roles[1]': must be a non-empty name without '=' or '-' (got 'read-er')"),
    (SKEW.replace('roles = ["writer", "reader"]', 'roles = ["writer", "writer"]'),
     "field 'roles': role names must be unique"),
    (SKEW.replace('roles = ["writer", "reader"]\n', ""), "field 'roles': missing: required: a"),
    (SKEW.replace('reader = "new"', 'reader = "newer"'),
     "field 'pairs[0].reader': unknown implementation 'newer' (listed: old, new)"),
    (SKEW.replace('reader = "new"\n', ""),
     "field 'pairs[0].reader': missing: every pair names an implementation for each role"),
    (SKEW + 'colour = "old"\n',
     "field 'pairs[0].colour': not a role of this matrix (roles: writer, reader)"),
    (SKEW.replace('target = "reference:legacy"', "target = 3"),
     "field 'implementations.old.target': expected a string, got 3"),
    ("roles = [", "not valid TOML"),
])
def test_skew_matrix_errors(tmp_path: Path, text: str, expected: str) -> None:
    assert _error(tmp_path, SkewMatrixFile, text).startswith(expected)


def test_cross_field_rules_point_at_the_field_to_fix(tmp_path: Path) -> None:
    text = '[faults]\nallow = ["observe", "metadata_faults"]\n'
    assert _error(tmp_path, ClusterFile, text).startswith(
        "field 'faults.allow': metadata_faults needs toxiproxy.url")


def test_unreadable_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="absent.toml: no such file"):
        load(RunMatrixFile, tmp_path / "absent.toml")
    with pytest.raises(SchemaError, match="is a directory"):
        load(RunMatrixFile, tmp_path)
