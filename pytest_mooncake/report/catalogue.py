"""The requirement catalogue (MR-, CO-, MP-, FW- IDs), read from the packaged TOML copy."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Requirement:
    id: str
    family: str
    title: str
    text: str


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    rfc: str


@dataclass(frozen=True)
class Catalogue:
    requirements: dict[str, Requirement]
    families: dict[str, Family]

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.requirements

    def __getitem__(self, req_id: str) -> Requirement:
        return self.requirements[req_id]

    def order(self, req_id: str) -> tuple[int, int, str]:
        """Sort key: family in catalogue order, then number (MR-2 before MR-10)."""
        fam, _, num = req_id.partition("-")
        fam_index = list(self.families).index(fam) if fam in self.families else 99
        return (fam_index, int(num) if num.isdigit() else 0, req_id)

    def suggest(self, req_id: str) -> str:
        fam = req_id.partition("-")[0].upper()
        ids = [r for r in self.requirements if r.startswith(fam + "-")]
        if ids:
            return f"{fam} IDs run {ids[0]}..{ids[-1]}"
        return "families are " + ", ".join(self.families)


@functools.cache
def load_catalogue() -> Catalogue:
    raw = tomllib.loads(
        resources.files("pytest_mooncake").joinpath("data/requirements.toml").read_text("utf-8")
    )
    fams = {k: Family(k, v["name"], v["rfc"]) for k, v in raw["families"].items()}
    reqs = {
        k: Requirement(k, v["family"], v["title"], v["text"]) for k, v in raw["requirements"].items()
    }
    return Catalogue(reqs, fams)
