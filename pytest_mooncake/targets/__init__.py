"""Targets: one module per kind of implementation under test, found by name.

``--mc-target=NAME[:VARIANT]`` is resolved here. Target modules are imported lazily so that
selecting the reference engine never imports docker or the Mooncake wheel.
"""

from __future__ import annotations

import importlib

from pytest_mooncake.targets.base import (
    Capability,
    EngineHandle,
    LookupResult,
    MasterClusterHandle,
    MasterEndpoint,
    MetadataHandle,
    RdmaHandle,
    Target,
    TargetContext,
    TargetError,
    TargetLacks,
    TransferResult,
)

__all__ = [
    "Capability", "EngineHandle", "LookupResult", "MasterClusterHandle", "MasterEndpoint",
    "MetadataHandle", "RdmaHandle", "Target", "TargetContext", "TargetError", "TargetLacks", "TransferResult",
    "KNOWN_TARGETS", "UnknownTarget", "resolve_target",
]

KNOWN_TARGETS: dict[str, tuple[str, str]] = {
    "reference": (
        "pytest_mooncake.targets.reference:ReferenceTarget",
        "the Python reference engine; variants: rfc (default), legacy",
    ),
    "mooncake": (
        "pytest_mooncake.targets.mooncake.local_placement:MooncakeTarget",
        "a real Mooncake build: mooncake (the installed wheel), mooncake:DIR (an install "
        "directory), mooncake:REQUIREMENT (must be satisfied by the installed wheel)",
    ),
    "docker": (
        "pytest_mooncake.targets.mooncake.docker_placement:DockerTarget",
        "Mooncake in containers through the docker SDK: docker:IMAGE",
    ),
    "cluster": (
        "pytest_mooncake.targets.mooncake.deployment_placement:ClusterTarget",
        "an existing deployment described by a TOML manifest: cluster:FILE.toml, or "
        "cluster:example (the shipped example)",
    ),
}
"""name -> (module:class, one-line description). External targets add themselves here."""


class UnknownTarget(ValueError):
    """The ``--mc-target`` value names no known target or variant."""


def known_targets_text() -> str:
    return "; ".join(f"{name} ({desc})" for name, (_, desc) in sorted(KNOWN_TARGETS.items()))


def resolve_target(spec: str) -> Target:
    """Build the target named by ``NAME[:VARIANT]``."""
    spec = spec.strip()
    name, _, variant = spec.partition(":")
    if name not in KNOWN_TARGETS:
        raise UnknownTarget(
            f"unknown target {spec!r}; known targets: {known_targets_text()}"
        )
    path, _ = KNOWN_TARGETS[name]
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls.from_spec(variant or None)
