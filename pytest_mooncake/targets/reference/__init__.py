"""The reference target: the Python reference engine under its two profiles.

``rfc`` implements every requirement; ``legacy`` reproduces Mooncake 0.3.13's behaviour before
the RFCs. This package (and tests/) is the only place outside reference_engine that imports
reference_engine; each module here drives one part of it (engines, RDMA, masters).
"""

from __future__ import annotations

from pytest_mooncake.targets.base import Capability, Target

PROFILES = ("rfc", "legacy")


class ReferenceTarget(Target):
    kind = "reference"
    capabilities = frozenset()

    def __init__(self, profile: str = "rfc"):
        super().__init__(None if profile == "rfc" else profile)
        self.profile = profile

    @classmethod
    def from_spec(cls, variant: str | None) -> ReferenceTarget:
        profile = variant or "rfc"
        if profile not in PROFILES:
            from pytest_mooncake.targets import UnknownTarget

            raise UnknownTarget(
                f"unknown reference profile {profile!r}; use reference (= reference:rfc) "
                f"or reference:legacy"
            )
        return cls(profile)

    @property
    def version(self) -> str:
        import reference_engine

        return f"reference-engine {reference_engine.__version__} ({self.profile})"

    def lack_reason(self, capability: Capability) -> str:
        return f"the reference engine does not implement {capability.value} yet"
