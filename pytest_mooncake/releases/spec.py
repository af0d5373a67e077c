"""Which Mooncake release a string names: ``0.3.12.post1``, ``mooncake==0.3.12.post1``,
``mooncake-cuda13==0.3.14`` or the full distribution name ``mooncake-transfer-engine-cuda13==0.3.14``.

A release is one exact version of one *flavour* (the PyPI distribution it ships as). Where the
string names no flavour, ``flavour`` is None until ``catalog.default_flavour`` picks the one PyPI
has; ``ReleaseSpec.with_flavour`` returns the completed spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from packaging.version import InvalidVersion, Version

DIST_PREFIX = "mooncake-transfer-engine"


@dataclass(frozen=True)
class Flavour:
    """One way Mooncake is built and published: its PyPI distribution name."""

    name: str
    distribution: str
    summary: str


FLAVOURS: dict[str, Flavour] = {
    f.name: f for f in (
        Flavour("non-cuda", f"{DIST_PREFIX}-non-cuda", "built without CUDA"),
        Flavour("cuda13", f"{DIST_PREFIX}-cuda13", "built against CUDA 13 (links the CUDA driver)"),
    )
}


class SpecError(ValueError):
    """A string that names no Mooncake release; the message says what was wrong and what works."""


FORMS = ("VERSION (e.g. 0.3.13.post1)", "mooncake==VERSION",
         f"mooncake-FLAVOUR==VERSION (FLAVOUR one of {', '.join(FLAVOURS)})",
         f"{DIST_PREFIX}-FLAVOUR==VERSION")
_NAMED = re.compile(r"^\s*(?P<name>[A-Za-z0-9_.-]+)\s*==\s*(?P<version>\S+)\s*$")


@dataclass(frozen=True)
class ReleaseSpec:
    """An exact Mooncake version and, once chosen, its flavour."""

    version: str
    flavour: str | None = None

    def __post_init__(self) -> None:
        if self.flavour is not None and self.flavour not in FLAVOURS:
            raise SpecError(f"unknown Mooncake flavour {self.flavour!r}: known are "
                            f"{', '.join(FLAVOURS)}")

    @property
    def distribution(self) -> str:
        """The PyPI distribution (needs a flavour)."""
        return FLAVOURS[self._need_flavour()].distribution

    @property
    def requirement(self) -> str:
        """What pip installs: ``mooncake-transfer-engine-FLAVOUR==VERSION``."""
        return f"{self.distribution}=={self.version}"

    @property
    def key(self) -> str:
        """A file-name-safe identity: ``FLAVOUR-VERSION``."""
        return f"{self._need_flavour()}-{self.version}"

    def with_flavour(self, flavour: str) -> ReleaseSpec:
        return replace(self, flavour=flavour)

    def _need_flavour(self) -> str:
        if self.flavour is None:
            raise SpecError(f"Mooncake {self.version}: no flavour chosen yet (resolve the spec "
                            f"with catalog.resolve first)")
        return self.flavour

    def __str__(self) -> str:
        if self.flavour is None:
            return f"mooncake=={self.version}"
        return f"mooncake-{self.flavour}=={self.version}"


def _flavour_of(name: str, text: str) -> str | None:
    low = name.lower().replace("_", "-")
    if low in ("mooncake", DIST_PREFIX):
        return None
    for prefix in (f"{DIST_PREFIX}-", "mooncake-"):
        if low.startswith(prefix) and low[len(prefix):] in FLAVOURS:
            return low[len(prefix):]
    raise SpecError(f"{text!r}: {name!r} is not a Mooncake release name; write one of: "
                    f"{'; '.join(FORMS)}")


def parse_spec(text: str) -> ReleaseSpec:
    """Parse a release string; raises ``SpecError`` naming the accepted forms."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"empty Mooncake release: write one of: {'; '.join(FORMS)}")
    match = _NAMED.match(text)
    if match:
        flavour, raw = _flavour_of(match["name"], text), match["version"]
    elif re.match(r"^\s*[0-9]", text):
        flavour, raw = None, text.strip()
    else:
        hint = (" (a release is one exact version: use ==)"
                if re.search(r"[<>~!]=?|===?", text) else "")
        raise SpecError(f"{text!r} names no Mooncake release{hint}; write one of: "
                        f"{'; '.join(FORMS)}")
    try:
        version = Version(raw)
    except InvalidVersion:
        raise SpecError(f"{text!r}: {raw!r} is not a version (e.g. 0.3.13.post1)") from None
    if str(version) != raw:
        raise SpecError(f"{text!r}: write the version as PyPI does, {str(version)!r}")
    return ReleaseSpec(str(version), flavour)
