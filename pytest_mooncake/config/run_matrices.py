"""Run matrices (``--mc-matrix``): one session over several targets, a matrix column each."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.schemas.run_matrix import RunColumn, RunMatrixFile
from pytest_mooncake.schemas.shipped_files import NotShipped, find
from pytest_mooncake.schemas.toml_documents import SchemaError, load


def load_matrix(spec: str, rootdir: Path) -> list[RunColumn]:
    """The columns of a matrix file (``schemas/run_matrix.py``): target spec and the backends
    each is deployed on. ``spec`` is a path, or the name of a shipped matrix
    (``reference-profiles``, ``release``, ``backends``) or of one in the project's own
    ``fixtures/matrices/``."""
    try:
        path = find("matrices", spec, [rootdir])
    except NotShipped as exc:
        raise pytest.UsageError(f"--mc-matrix={spec}: no such file ({exc})") from None
    try:
        doc = load(RunMatrixFile, path)
    except SchemaError as exc:
        raise pytest.UsageError(f"--mc-matrix={exc}") from None
    return list(doc.column)
