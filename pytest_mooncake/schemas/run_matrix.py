"""A run matrix (``--mc-matrix``, ``pytest_mooncake/data/matrices/NAME.toml``): one session over several
targets, a matrix column each.

    [[column]]
    target = "reference:legacy"         # as --mc-target spells it
    metadata = "redis"                  # optional: the column's --mc-metadata (etcd|redis|http|http:reference|p2p)
    ha = "etcd"                         # optional: the column's --mc-ha (etcd|redis)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pytest_mooncake.schemas.toml_documents import StrictTable, TargetSpec


class RunColumn(StrictTable):
    target: TargetSpec = Field(
        description='the target of this column, as --mc-target spells it ("NAME[:VARIANT]")')
    metadata: Literal["etcd", "redis", "http", "http:reference", "p2p"] | None = Field(
        None, description="the column's transfer-engine metadata backend (as --mc-metadata); "
                          "default: the session's")
    ha: Literal["etcd", "redis"] | None = Field(
        None, description="the column's master HA backend (as --mc-ha); default: the session's")


class RunMatrixFile(StrictTable):
    column: list[RunColumn] = Field(
        min_length=1, description='at least one [[column]] table with target = "NAME[:VARIANT]"')
