"""Targets: one module per kind of implementation under test, found by name.

``--mc-target=NAME[:VARIANT][@PROFILE]`` is resolved here (``@PROFILE``: how a real build is
deployed, ``targets/mooncake/profile_strategies``). Target modules are imported lazily so that
selecting the reference engine never imports docker or the Mooncake wheel.
"""

from __future__ import annotations

import importlib

from pytest_mooncake.targets.base import (
    Capability,
    ComponentStartError,
    EngineHandle,
    LookupResult,
    MasterClusterHandle,
    MasterEndpoint,
    MetadataHandle,
    ObservationFailed,
    PreconditionUnestablished,
    RdmaHandle,
    Target,
    TargetContext,
    TargetError,
    TargetLacks,
    TransferResult,
    WireClientHandle,
)

__all__ = [
    "Capability", "ComponentStartError", "EngineHandle", "LookupResult", "MasterClusterHandle",
    "MasterEndpoint", "MetadataHandle", "ObservationFailed", "PreconditionUnestablished",
    "RdmaHandle", "Target",
    "TargetContext", "TargetError", "TargetLacks", "TransferResult", "WireClientHandle",
    "KNOWN_TARGETS", "UnknownTarget", "names_release", "resolve_target", "split_profile",
    "target_identity",
]

KNOWN_TARGETS: dict[str, tuple[str, str]] = {
    "reference": (
        "pytest_mooncake.targets.reference:ReferenceTarget",
        "the Python reference engine; variants: rfc (default), legacy",
    ),
    "mooncake": (
        "pytest_mooncake.targets.mooncake.placements.this_host:MooncakeTarget",
        "a real Mooncake build: mooncake (the installed wheel), mooncake:DIR (an install "
        "directory), mooncake:REQUIREMENT (must be satisfied by the installed wheel), "
        "mooncake==VERSION or mooncake-FLAVOUR==VERSION (that release in its own cached "
        "environment, e.g. mooncake-cuda13==0.3.14); any of them @PROFILE: deployed as that "
        "profile (defaults, ha-oplog: the default, ha-oplog-short-lease, ha-snapshot)",
    ),
    "docker": (
        "pytest_mooncake.targets.mooncake.placements.containers:DockerTarget",
        "Mooncake in containers through the docker SDK: docker:IMAGE",
    ),
    "cluster": (
        "pytest_mooncake.targets.mooncake.placements.existing_cluster:ClusterTarget",
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
    """Build the target named by ``NAME[:VARIANT]``, or a Mooncake release by version
    (``mooncake==0.3.12.post1``, ``mooncake-cuda13==0.3.14``), either deployed as
    ``@PROFILE`` when given (an unknown profile is ``UnknownTarget`` listing the known ones)."""
    spec = spec.strip()
    base, profile = split_profile(spec)
    if profile is not None and base.partition(":")[0] == "reference":
        raise UnknownTarget(f"--mc-target={spec}: the reference engine has variants "
                            f"(reference:rfc, reference:legacy), not deployment profiles")
    if names_release(base):
        target = resolve_release(base)
    else:
        name, _, variant = base.partition(":")
        if name not in KNOWN_TARGETS:
            raise UnknownTarget(
                f"unknown target {spec!r}; known targets: {known_targets_text()}"
            )
        target = _target_class(name).from_spec(variant or None)
    use = getattr(target, "use_profile", None)
    if use is not None:
        try:
            use(profile, spec)
        except ValueError as exc:  # profile_strategies.UnknownProfile
            raise UnknownTarget(str(exc)) from None
    return target


def split_profile(spec: str) -> tuple[str, str | None]:
    """``SPEC@PROFILE`` -> (SPEC, PROFILE); (spec, None) without one."""
    from pytest_mooncake.targets.mooncake.profile_strategies import split_profile as split

    return split(spec)


def _target_class(name: str) -> type[Target]:
    """The class ``KNOWN_TARGETS`` names for ``name``, imported by its dotted path (the
    registry imports no target module itself, so no target module imports back in a cycle)."""
    path, _ = KNOWN_TARGETS[name]
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def names_release(spec: str) -> bool:
    """Whether ``spec`` names a Mooncake release by version rather than ``NAME[:VARIANT]``."""
    from pytest_mooncake.targets.mooncake.install import names_release as names

    return names(spec)


def resolve_release(spec: str) -> Target:
    """The Mooncake target of the release ``spec`` names, in its cached environment."""
    return _target_class("mooncake").from_release(spec)


def target_identity(spec: str) -> str:
    """The matrix column a target spec names, without building the target: its ``label``
    (``reference`` for ``reference:rfc``, ``mooncake-FLAVOUR==VERSION`` for any spelling of
    a release); ``UnknownTarget`` for a spec naming none."""
    spec = spec.strip()
    base, profile = split_profile(spec)
    if names_release(base):
        from pytest_mooncake.targets.mooncake.install import SpecError, release_label
        from pytest_mooncake.targets.mooncake.profile_strategies import (
            UnknownProfile,
            label_suffix,
            profile_named,
        )

        try:
            return release_label(base) + label_suffix(profile_named(profile, spec))
        except (SpecError, UnknownProfile) as exc:
            raise UnknownTarget(str(exc)) from None
    if spec.startswith("reference"):
        return resolve_target(spec).label
    from pytest_mooncake.targets.mooncake.profile_strategies import DEFAULT_PROFILE

    return base if profile in (None, DEFAULT_PROFILE) else spec
