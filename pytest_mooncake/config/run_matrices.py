"""Run matrices (``--mc-matrix``): one session over several targets, a matrix column each."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.report.catalogue import tomllib


def load_matrix_columns(spec: str, rootdir: Path) -> list[str]:
    """Target specs of a matrix file: ``[[column]] target = "reference:legacy"`` entries. ``spec``
    is a path, or a name of a file in ``fixtures/matrices/``."""

    candidates = [Path(spec), rootdir / spec, rootdir / "fixtures" / "matrices" / f"{spec}.toml"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise pytest.UsageError(
            f"--mc-matrix={spec}: no such file (looked at {', '.join(str(c) for c in candidates)})"
        )
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise pytest.UsageError(f"--mc-matrix={path}: not valid TOML: {exc}") from None
    columns = doc.get("column")
    if not isinstance(columns, list) or not columns:
        raise pytest.UsageError(
            f'--mc-matrix={path}: needs at least one [[column]] table with target = "NAME[:VARIANT]"'
        )
    specs = []
    for i, col in enumerate(columns):
        target = col.get("target") if isinstance(col, dict) else None
        if not isinstance(target, str) or not target.strip():
            raise pytest.UsageError(
                f"--mc-matrix={path}: column {i + 1} has no target string (got {col!r})"
            )
        specs.append(target.strip())
    return specs
