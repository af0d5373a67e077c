"""A version-skew matrix (``pytest_mooncake/data/skew/NAME.toml``): the roles of a pair, the implementations
a role may run and the pairs to run. ``fixtures/version_skew.py`` loads it and checks that each
implementation names a target that exists.

    description = "..."                 # optional
    roles = ["writer", "reader"]        # required: the sides of the pair
    [implementations.NAME]              # one table per implementation a pair may use
    target = "reference:legacy"         # optional, as --mc-target spells it; default NAME;
                                        # "@target" is the target under test (--mc-target)
    description = "..."                 # optional
    [[pairs]]                           # one or more; every role named, nothing else
    writer = "NAME"
    reader = "NAME"
    judged = "reader"                   # optional: see below

A pair naming ``"@target"`` runs in every column (that role is the column's target). Without
``judged``, a pair that does not is run in every column too, judging the same builds each
time. With ``judged = "ROLE"``, such a pair judges the build its ROLE runs: it counts in that
build's column only, and a session without that column does not run it (e.g. an upgrade
0.3.13 -> 0.3.14 with ``judged = "new"`` counts in the 0.3.14 column).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from pytest_mooncake.schemas.toml_documents import StrictTable, TargetSpec, problem


def _role_name(value: str) -> str:
    if not value.strip() or "=" in value or "-" in value:
        raise ValueError(f"must be a non-empty name without '=' or '-' (got {value!r})")
    return value


class SkewImplementation(StrictTable):
    target: TargetSpec | None = Field(
        None, description='the target as --mc-target spells it (default: the table name); '
                          '"@target" is the target under test')
    description: str = ""


class SkewMatrixFile(StrictTable):
    description: str = ""
    roles: list[Annotated[str, AfterValidator(_role_name)]] = Field(
        min_length=1, description='required: a non-empty list of role names, e.g. '
                                  '["writer", "reader"]')
    implementations: dict[str, SkewImplementation] = Field(
        min_length=1, description="required: one [implementations.NAME] table per implementation")
    pairs: list[dict[str, str]] = Field(
        min_length=1, description="required: one or more [[pairs]] tables naming an "
                                  "implementation per role")
    judged: str | None = Field(
        None, description="optional: the role whose build a pair without \"@target\" judges "
                          "(it then counts in that build's column only)")

    @field_validator("roles")
    @classmethod
    def _unique_roles(cls, roles: list[str]) -> list[str]:
        if len(set(roles)) != len(roles):
            raise ValueError(f"role names must be unique (got {roles})")
        return roles

    @model_validator(mode="after")
    def _pairs_name_every_role(self) -> SkewMatrixFile:
        if self.judged is not None and self.judged not in self.roles:
            raise problem(("judged",), f"not a role of this matrix (roles: "
                          f"{', '.join(self.roles)})", self.judged)
        listed = ", ".join(self.implementations)
        for i, pair in enumerate(self.pairs):
            for role in self.roles:
                if role not in pair:
                    raise problem(("pairs", i, role), "missing: every pair names an "
                                  f"implementation for each role ({', '.join(self.roles)})")
            for key in sorted(set(pair) - set(self.roles)):
                raise problem(("pairs", i, key), f"not a role of this matrix (roles: "
                              f"{', '.join(self.roles)})")
            for role in self.roles:
                if pair[role] not in self.implementations:
                    raise problem(("pairs", i, role), f"unknown implementation {pair[role]!r} "
                                  f"(listed: {listed})", pair[role])
        return self

    def target_of(self, name: str) -> str:
        """The target spec implementation ``name`` runs (its table name when it gives none)."""
        return self.implementations[name].target or name
