"""A run matrix (``--mc-matrix``, ``pytest_mooncake/data/matrices/NAME.toml``): one session over several
targets, a matrix column each.

    [[column]]
    target = "reference:legacy"         # as --mc-target spells it
"""

from __future__ import annotations

from pydantic import Field

from pytest_mooncake.schemas.toml_documents import StrictTable, TargetSpec


class RunColumn(StrictTable):
    target: TargetSpec = Field(
        description='the target of this column, as --mc-target spells it ("NAME[:VARIANT]")')


class RunMatrixFile(StrictTable):
    column: list[RunColumn] = Field(
        min_length=1, description='at least one [[column]] table with target = "NAME[:VARIANT]"')
