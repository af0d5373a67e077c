"""Locating a Mooncake build from the SPEC, its version, and the capabilities it is probed for."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from pytest_mooncake.targets import UnknownTarget, resolve_target
from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.mooncake.install import INSTALL_HINT, MooncakeInstall
from pytest_mooncake.targets.mooncake.placements.this_host import MooncakeTarget

WHEEL = "mooncake-transfer-engine-non-cuda"


def _installed_version() -> str | None:
    try:
        return md.version(WHEEL)
    except md.PackageNotFoundError:
        return None


needs_wheel = pytest.mark.skipif(_installed_version() is None,
                                 reason=f"n/a: Mooncake is not installed: {INSTALL_HINT}")


@needs_wheel
def test_version_comes_from_package_metadata():
    target = resolve_target("mooncake")
    assert target.label == "mooncake"
    assert target.version == f"{WHEEL} {_installed_version()}"


@needs_wheel
def test_probed_capabilities_of_the_installed_wheel():
    target = resolve_target("mooncake")
    caps = target.capabilities
    for cap in (Capability.ENGINE, Capability.ENGINE_RESTART, Capability.KEEP_ADDRESSES,
                Capability.METADATA_ETCD, Capability.METADATA_HTTP, Capability.MASTER_CLUSTER):
        assert cap in caps, target.missing(cap)
    # 0.3.13 looks a peer up through its cache (get_first_buffer_address) and bounds the cache
    # with MC_TE_METADATA_REFRESH_INTERVAL_SECONDS (found in its ELF files by the probe);
    # it has no forced refresh of one peer
    assert Capability.CACHE_CONTROL in caps and Capability.CACHE_TTL in caps
    assert "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS" in target.placement.cache_knobs.reads
    assert "no forced refresh" in target.missing(Capability.FORCED_REFRESH)
    assert _installed_version() in target.missing(Capability.FORCED_REFRESH)
    assert "no counters" in target.missing(Capability.ENGINE_COUNTERS)
    # RDMA on the emulated devices (--mc-verbs=emulated; what auto means without a NIC)...
    target.use_verbs("emulated")
    assert Capability.RDMA_CONTROL in target.capabilities, target.missing(Capability.RDMA_CONTROL)
    assert "RDMA transport's state" in target.missing(Capability.RDMA_STATE)
    # the emulator parks its verbs calls: schedules are explored at the verbs boundary
    assert Capability.SCHEDULER in target.capabilities, target.missing(Capability.SCHEDULER)
    # ...but not on this host's own devices: nothing holds a real NIC's completions
    target.use_verbs("host")
    assert "interposer" in target.missing(Capability.RDMA_CONTROL)
    assert target.missing(Capability.SCHEDULER), "a host NIC's verbs calls cannot be parked"
    facts = target.facts["probe"]
    assert "get_first_buffer_address" in facts["engine_methods"]
    assert facts["binaries"]["mooncake_master"].endswith("mooncake/mooncake_master")
    described = target.describe()
    assert described["version"] == target.version
    assert "forced_refresh" in described["lacks"]


@needs_wheel
def test_probe_reads_the_published_descriptor_fields(mooncake_target):
    meta = mooncake_target.metadata_store("etcd")
    result = mooncake_target.probe_descriptor(meta)
    assert result["key"].startswith("mooncake/ram/mc-probe-")
    assert {"buffers", "name", "protocol", "tcp_data_host", "tcp_data_port"} <= set(result["fields"])
    # What 0.3.13 does, recorded rather than assumed: no instance_id in the descriptor.
    if _installed_version().startswith("0.3.13"):
        assert result["instance_id"] is False
    assert mooncake_target.describe()["facts"]["descriptor_has_instance_id"] is result["instance_id"]
    assert meta.get(result["key"]) is None


def test_install_directory_without_mooncake_is_not_installed(tmp_path):
    target = resolve_target(f"mooncake:{tmp_path}")
    assert target.label == f"mooncake:{tmp_path}"
    assert target.capabilities == frozenset()
    reason = target.missing(Capability.ENGINE)
    assert reason.startswith("Mooncake is not installed") and str(tmp_path) in reason
    assert INSTALL_HINT in reason
    assert target.version == "not installed"


def test_absent_wheel_makes_every_capability_na_with_the_install_hint():
    target = MooncakeTarget(MooncakeInstall(None, missing=f"Mooncake is not installed: "
                                                          f"{INSTALL_HINT}"))
    assert target.capabilities == frozenset()
    for cap in Capability:
        assert target.missing(cap) == (
            "Mooncake is not installed: pip install mooncake-transfer-engine-non-cuda (and "
            "apt-get install -y libibverbs1 librdmacm1 libnuma1)")
    with pytest.raises(TargetLacks) as lacks:
        target.start_engine("x", metadata=None)
    assert lacks.value.capability is Capability.ENGINE


def test_install_directory_is_put_first_on_pythonpath_and_path(tmp_path):
    (tmp_path / "mooncake").mkdir()
    (tmp_path / "mooncake" / "__init__.py").write_text("")
    target = resolve_target(f"mooncake:{tmp_path}")
    env = target.install.env()
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert env["PATH"].split(":")[:2] == [str(tmp_path / "bin"), str(tmp_path)]
    assert env["MC_TCP_BIND_ADDRESS"] == "127.0.0.1"
    assert target.version == f"mooncake unknown version at {tmp_path}"
    # The empty package has no engine: the probe says so instead of assuming.
    reason = target.missing(Capability.ENGINE)
    assert reason and "mooncake.engine" in reason


def test_missing_directory_and_bad_requirements_are_usage_errors(tmp_path):
    with pytest.raises(UnknownTarget, match="is not a directory"):
        resolve_target(f"mooncake:{tmp_path}/absent/")
    with pytest.raises(UnknownTarget, match="not a Mooncake distribution"):
        resolve_target("mooncake:requests>=2")
    with pytest.raises(UnknownTarget, match="neither a directory nor a valid pip requirement"):
        resolve_target("mooncake:===")


@needs_wheel
def test_requirement_spec_accepts_the_installed_wheel_or_says_what_to_install():
    target = resolve_target(f"mooncake:{WHEEL}=={_installed_version()}")
    assert target.version.endswith(_installed_version())
    with pytest.raises(UnknownTarget, match=r"pip install '.*==0\.0\.1'"):
        resolve_target(f"mooncake:{WHEEL}==0.0.1")
