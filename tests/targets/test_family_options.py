"""Every placement of the Mooncake family refuses the same options the same way, before it
starts or touches anything: an option no Mooncake target knows is a ``TypeError``; one the
build has no means for (``ttl_ms``, a foreign ``profile``, ``snapshots``, per-master etcd where
the placement cannot route it) is n/a (``TargetLacks``) with the capability; one a placement
cannot honour (an existing deployment cannot choose an engine's buffer size) is n/a naming the
option. Nothing is dropped silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.targets import resolve_target
from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.mooncake.placements.containers import DockerTarget

IMAGE = "kvcacheai/mooncake:0.3.13"


class _AnsweringDocker:
    """Just enough of a docker client for the probe to find an engine; anything more is a
    use the refusal should have prevented."""

    def __init__(self):
        self.images = self

    def ping(self):
        return True

    def get(self, name):
        raise LookupError(name)


class _Metadata:
    def __getattr__(self, name):
        raise AssertionError(f"the metadata store was used ({name}) before the refusal")


def _docker() -> DockerTarget:
    return DockerTarget(IMAGE, client_factory=lambda timeout: _AnsweringDocker())


def _cluster(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text('[etcd]\nendpoints = ["127.0.0.1:1"]\n[[masters]]\nadmin = "http://127.0.0.1:1"\n'
                    '[[engines]]\nsegment = "a"\ncontrol = "127.0.0.1:1"\n'
                    '[faults]\nallow = ["observe", "transfers"]\n')
    return resolve_target(f"cluster:{path}")


def _placements(tmp_path: Path) -> list:
    targets = [_docker(), _cluster(tmp_path)]
    local = resolve_target("mooncake")
    if Capability.ENGINE in local.capabilities:
        targets.append(local)
    return targets


def test_unknown_engine_option_is_a_type_error_everywhere(tmp_path):
    for target in _placements(tmp_path):
        with pytest.raises(TypeError, match="unknown option.*colour"):
            target.start_engine("a", _Metadata(), colour="blue")


def test_ttl_and_foreign_profile_are_refused_with_the_capability_everywhere(tmp_path):
    """ttl_ms: a build without a cache bound lacks cache_ttl (a FAIL where a requirement
    demands it); a deployment whose driver engines keep the bound their command lines give them
    refuses the option (engine: n/a, a limit of the deployment) before asking the build."""
    for target in _placements(tmp_path):
        if target.kind != "mooncake":
            with pytest.raises(TargetLacks) as lacks:
                target.start_engine("a", _Metadata(), ttl_ms=200)
            want = Capability.ENGINE if target.kind == "cluster" else Capability.CACHE_TTL
            assert lacks.value.capability is want, target.label
        with pytest.raises(TargetLacks) as lacks:
            target.start_engine("a", _Metadata(), profile="legacy")
        assert lacks.value.capability is Capability.VERSION_SKEW, target.label


def test_a_deployment_names_the_engine_option_it_cannot_honour(tmp_path):
    target = _cluster(tmp_path)
    for option, value in (("buffer_size", 4096), ("fixed_address", 0x7F0000000000)):
        with pytest.raises(TargetLacks) as lacks:
            target.start_engine("a", _Metadata(), **{option: value})
        assert lacks.value.capability is Capability.ENGINE
        assert lacks.value.reason.startswith(f"start_engine({option}=...): cluster:")
        assert "its engines run with the command lines the cluster file gives them" in \
            lacks.value.reason


def test_master_options_are_refused_alike_before_anything_starts(tmp_path):
    for target in (_docker(), _cluster(tmp_path)):
        with pytest.raises(TypeError, match="unknown option.*no_such_option"):
            target.master_cluster(masters=1, clients=0, no_such_option=True)
        with pytest.raises(TargetLacks) as lacks:
            target.master_cluster(masters=1, clients=0, snapshots=True)
        assert lacks.value.capability is Capability.MASTER_SNAPSHOT, target.label
        with pytest.raises(TargetLacks, match="master_cluster: lease_ttl: the Mooncake targets do not set"):
            target.master_cluster(masters=1, clients=0, lease_ttl=3)
    with pytest.raises(TargetLacks) as lacks:
        _cluster(tmp_path).master_cluster(masters=1, clients=0, client_ttl=2)
    assert lacks.value.reason.startswith("master_cluster(client_ttl=...): cluster:")
