"""A run matrix (``--mc-matrix``, ``fixtures/matrices/NAME.toml``): one session over several
targets, a matrix column each.

    [[column]]
    target = "reference:legacy"         # as --mc-target spells it
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _target_spec(value: str) -> str:
    if not value.strip():
        raise ValueError('must be a non-empty string like "reference:legacy"')
    return value.strip()


class RunColumn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    target: Annotated[str, AfterValidator(_target_spec)] = Field(
        description='the target of this column, as --mc-target spells it ("NAME[:VARIANT]")')


class RunMatrixFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    column: list[RunColumn] = Field(
        min_length=1, description='at least one [[column]] table with target = "NAME[:VARIANT]"')
