"""Run matrices (``--mc-matrix``): one session over several targets, a matrix column each."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.schemas.run_matrix import RunMatrixFile
from pytest_mooncake.schemas.toml_documents import SchemaError, load


def load_matrix_columns(spec: str, rootdir: Path) -> list[str]:
    """Target specs of a matrix file (``schemas/run_matrix.py``). ``spec`` is a path, or a name
    of a file in ``fixtures/matrices/``."""
    candidates = [Path(spec), rootdir / spec, rootdir / "fixtures" / "matrices" / f"{spec}.toml"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise pytest.UsageError(
            f"--mc-matrix={spec}: no such file (looked at {', '.join(str(c) for c in candidates)})"
        )
    try:
        doc = load(RunMatrixFile, path)
    except SchemaError as exc:
        raise pytest.UsageError(f"--mc-matrix={exc}") from None
    return [column.target for column in doc.column]
