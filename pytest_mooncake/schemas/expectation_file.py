"""An expectations file (``--mc-expect``, ``pytest_mooncake/data/expectations/NAME.toml``): the
verdicts a target is expected to give, so CI fails on a change rather than on a known FAIL.

One target::

    target = "mooncake-transfer-engine-non-cuda 0.3.13.post1"   # what it describes (shown)
    profile = "ha-oplog"                                         # its deployment profile
    default = "pass"        # requirements the file does not list (the default's default)

    [requirements]
    MR-2 = "pass"
    MR-1 = { verdict = "FAIL", reason = "cached for ever", issue = "https://..." }
    MP-7 = { verdict = ["pass", "intermittent"], reason = "a hung leader races the lease" }

    [requirements.MR-3]                 # a table when it also names tests or skew pairs
    verdict = "FAIL"
    tests = { "suites/metadata/test_cache.py::test_x[etcd]" = "pass" }
    pairs = { "master=reference-client=target" = "n/a" }

A matrix (``--mc-matrix``): a column label to a one-target file (a path or a name)::

    [columns]
    "reference" = "reference-rfc@ha-oplog"
    "mooncake-non-cuda==0.3.13.post1" = "mooncake-0.3.13.post1@ha-oplog"
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from pytest_mooncake.schemas.toml_documents import StrictTable, problem

VERDICTS_CONTEXT = "verdicts"
"""The validation context key naming the verdict words a file may use (the reader passes the
verdict rule's, so this layer does not import it)."""
DEFAULT_EXPECTED = ("pass",)
"""What a requirement the file does not list is expected to be, when the file names no
``default``: like web-platform-tests' metadata, an unlisted requirement is expected to pass."""


def _verdicts(value: str | list[str], info: ValidationInfo) -> tuple[str, ...]:
    known = (info.context or {}).get(VERDICTS_CONTEXT) or ()
    words = [value] if isinstance(value, str) else list(value)
    if not words:
        raise ValueError(f"must name at least one verdict ({', '.join(known)})")
    for word in words:
        if known and word not in known:
            raise ValueError(f"unknown verdict {word!r} (known: {', '.join(known)})")
    return tuple(dict.fromkeys(words))


Verdicts = Annotated[str | list[str], AfterValidator(_verdicts)]
"""One verdict, or an array of them (any one of them matches)."""


class Expected(StrictTable):
    verdict: Verdicts = Field(description='the expected verdict, e.g. "FAIL" or ["pass", "intermittent"]')
    reason: str = ""
    issue: str = ""


def _as_tables(entries: Any) -> Any:
    """``MR-1 = "FAIL"`` is short for ``MR-1 = { verdict = "FAIL" }`` (one shape to validate,
    so an error names the field, not a union branch)."""
    if not isinstance(entries, dict):
        return entries
    return {k: v if isinstance(v, dict) else {"verdict": v} for k, v in entries.items()}


class RequirementExpected(Expected):
    tests: dict[str, Expected] = Field(default_factory=dict)
    pairs: dict[str, Expected] = Field(default_factory=dict)

    _tables = field_validator("tests", "pairs", mode="before")(_as_tables)


def _req_id(value: str) -> str:
    family, dash, number = value.partition("-")
    if not (dash and family.isalpha() and family.isupper() and number.isdigit()):
        raise ValueError(f"{value!r} is not a requirement ID like MR-3")
    return value


class ExpectationFile(StrictTable):
    target: str = ""
    profile: str = ""
    default: Verdicts = Field(default=list(DEFAULT_EXPECTED))
    requirements: dict[Annotated[str, AfterValidator(_req_id)],
                       RequirementExpected] = Field(default_factory=dict)
    columns: dict[str, str] = Field(
        default_factory=dict, description="column label -> one-target expectations file")

    _tables = field_validator("requirements", mode="before")(_as_tables)

    @model_validator(mode="after")
    def _one_kind(self) -> ExpectationFile:
        if self.columns and self.requirements:
            raise problem(("columns",), "a file lists either [requirements] (one target) or "
                                        "[columns] (a matrix), not both")
        return self
