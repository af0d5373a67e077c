"""The cluster target: cluster file validation, n/a for what the file does not permit or
link, and never stopping or killing what it only observes (checked against real 0.3.13
processes). Node control through the file's components is tested on the lab
(tests/lab/test_cluster_target_on_lab.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_mooncake.schemas.cluster_manifest import load_manifest
from pytest_mooncake.targets import UnknownTarget, resolve_target
from pytest_mooncake.targets.base import Capability, TargetLacks
from pytest_mooncake.targets.mooncake.placements.existing_cluster import ClusterTarget

EXAMPLE = Path(__file__).parents[2] / "pytest_mooncake" / "data" / "clusters" / "example.toml"


def manifest(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_manifest_is_valid():
    m = load_manifest(EXAMPLE)
    assert m.name == "example" and m.version == "0.3.13"
    assert m.etcd.endpoints == ("127.0.0.1:2379",)
    assert [x.admin for x in m.masters] == ["http://127.0.0.1:9003", "http://127.0.0.1:9004"]
    assert [(e.segment, e.control, e.aliases) for e in m.engines] == [
        ("node-a", "127.0.0.1:7000", ("seg-a",)), ("node-b", "127.0.0.1:7001", ("seg-b",))]
    assert m.allow == {"observe", "transfers", "metadata_faults"}
    target = resolve_target(f"cluster:{EXAMPLE}")
    assert target.version == "cluster example (0.3.13)"
    assert target.capabilities == {Capability.ENGINE, Capability.MASTER_CLUSTER,
                                   Capability.METADATA_ETCD, Capability.METADATA_STORE,
                                   Capability.REGISTER_MEMORY,
                                   Capability.CACHE_CONTROL,  # the driver's lookup
                                   Capability.CACHE_TTL,  # start_engine(ttl_ms=) refuses (n/a)
                                   Capability.PROMOTABILITY}  # probed live by promotable()
    assert "links no engine to a [[components]] entry" in target.missing(
        Capability.ENGINE_RESTART)
    assert "no engine can have its metadata traffic routed" in target.missing(
        Capability.METADATA_FAULTS)
    with pytest.raises(TargetLacks, match=r"start_engine\(ttl_ms=\.\.\.\).*cannot set ttl_ms") as lacks:
        target.start_engine("seg-a", None, ttl_ms=200)
    assert lacks.value.capability is Capability.ENGINE  # the deployment's limit: n/a, not FAIL
    assert "no forced refresh" in target.missing(Capability.FORCED_REFRESH)
    assert target.toxiproxy_url == "http://127.0.0.1:8474"


@pytest.mark.parametrize("text, field", [
    ('[etcd]\nendpoints = "127.0.0.1:2379"\n', "field 'etcd.endpoints': expected an array, got a string"),
    ('[etcd]\nendpoints = ["nohost"]\n', "field 'etcd.endpoints[0]': expected host:port, got 'nohost'"),
    ('[etcd]\nendpoints = ["h:99999"]\n', "field 'etcd.endpoints[0]': expected host:port, got 'h:99999'"),
    ('[[masters]]\nadmin = "ftp://x"\n', "field 'masters[0].admin': expected an http:// or https:// URL"),
    ('[[masters]]\nrpc = "h:1"\n', "field 'masters[0].admin': missing: the master's admin/metrics URL"),
    ('[[masters]]\nadmin = "http://h:1"\nport = 3\n',
     "field 'masters[0].port': unknown field (known: admin, component, flags, rpc)"),
    ('[[engines]]\nsegment = "a"\nprotocol = "grpc"\n', "field 'engines[0].protocol'"),
    ('[[engines]]\nsegment = ""\ncontrol = "h:1"\n', "field 'engines[0].segment': expected a non-empty"),
    ('[[engines]]\nsegment = "a"\ncontrol = "h:1"\n[[engines]]\nsegment = "b"\ncontrol = "h:2"\n'
     'aliases = ["a"]\n', "field 'engines': segment name(s) listed twice: a"),
    ('[faults]\nallow = ["observe", "kill_everything"]\n',
     "field 'faults.allow[1]': unknown permission 'kill_everything'"),
    ('[faults]\nallow = ["metadata_faults"]\n', "field 'faults.allow': metadata_faults needs toxiproxy.url"),
    ('[toxiproxy]\nurl = "localhost:8474"\n', "field 'toxiproxy.url': expected an http"),
    ('[fault]\nallow = []\n',
     "field 'fault': unknown field (known: clients, cluster, components, engines, etcd, faults"),
    ('[[engines]]\nsegment = "a"\ncache_env = ["MC_TTL"]\n', "field 'engines[0].cache_env[0]'"),
    ('[etcd\nendpoints = 3\n', "not valid TOML"),
])
def test_invalid_manifests_name_the_file_and_the_field(tmp_path, text, field):
    path = manifest(tmp_path, text)
    with pytest.raises(UnknownTarget) as err:
        resolve_target(f"cluster:{path}")
    assert str(err.value).startswith(f"{path}: ")
    assert field in str(err.value)


PER_TEST_ENGINES = """
[etcd]
endpoints = ["127.0.0.1:1"]
[[nodes]]
name = "n1"
host = "127.0.0.1"
[[components]]
name = "engine-a"
kind = "engine"
node = "n1"
start = "exec driver engine-a"
[[components]]
name = "engine-b"
kind = "engine"
node = "n1"
unit = "engine-b.service"
[[engines]]
segment = "seg-a"
control = "127.0.0.1:1"
component = "engine-a"
lifecycle = "per_test"
cache_env = ["MC_TE_METADATA_REFRESH_INTERVAL_SECONDS"]
[faults]
allow = ["observe", "transfers"]
"""


@pytest.mark.parametrize("engine_b", [
    'control = "127.0.0.1:2"\ncomponent = "engine-a"\nlifecycle = "per_test"\n',
    'control = "127.0.0.1:2"\ncomponent = "engine-b"\nlifecycle = "per_test"\n'
    'cache_env = ["MC_TE_METADATA_REFRESH_INTERVAL_SECONDS"]\n',  # a unit: no env to set
    'control = "127.0.0.1:2"\ncomponent = "engine-a"\n'
    'cache_env = ["MC_TE_METADATA_REFRESH_INTERVAL_SECONDS"]\n',  # attached
    'control = "127.0.0.1:2"\ncomponent = "engine-a"\nlifecycle = "per_test"\n'
    'cache_env = ["MC_DISABLE_METACACHE"]\n',  # no refresh interval to bound by
])
def test_a_driver_engine_takes_a_ttl_where_the_file_names_its_cache_settings(
        tmp_path, engine_b):
    """A driver engine reads its cache bound from its environment at start: the target sets
    it for a per-test engine whose entry names the setting its build reads (the lab writes it
    from the release's probed ELF names) and whose component it starts with a command line;
    another engine of the file is refused ttl_ms (engine: n/a) before anything starts."""
    alone = resolve_target(f"cluster:{manifest(tmp_path, PER_TEST_ENGINES, 'a.toml')}")
    assert "ttl_ms" in alone.placement.engine_options
    text = PER_TEST_ENGINES + f'[[engines]]\nsegment = "seg-b"\n{engine_b}'
    target = resolve_target(f"cluster:{manifest(tmp_path, text)}")
    assert "ttl_ms" in target.placement.engine_options  # seg-a can take one
    with pytest.raises(TargetLacks) as lacks:
        target.start_engine("seg-b", target.metadata_store("etcd"), ttl_ms=200)
    assert lacks.value.capability is Capability.ENGINE
    assert "engine seg-b" in lacks.value.reason and "cache_env" in lacks.value.reason


def test_missing_file_and_missing_spec_are_usage_errors(tmp_path):
    with pytest.raises(UnknownTarget, match="no such cluster file"):
        resolve_target(f"cluster:{tmp_path}/absent.toml")
    with pytest.raises(UnknownTarget, match="needs a cluster file"):
        resolve_target("cluster")


def test_observe_only_manifest_makes_faults_and_transfers_na(tmp_path):
    path = manifest(tmp_path, '[etcd]\nendpoints = ["127.0.0.1:1"]\n[[engines]]\nsegment = "a"\n'
                              'control = "127.0.0.1:1"\n[faults]\nallow = ["observe"]\n')
    target = resolve_target(f"cluster:{path}")
    # the engine is observed (descriptor) though nothing may drive it
    assert target.capabilities == {Capability.METADATA_ETCD, Capability.METADATA_STORE,
                                   Capability.ENGINE}
    assert "not by P2P handshake" in target.missing(Capability.METADATA_P2P)
    assert target.missing(Capability.REGISTER_MEMORY) == (
        f"cluster:{path} does not permit transfers (allow = ['observe'])")
    assert target.missing(Capability.METADATA_FAULTS) == (
        f"cluster:{path} does not allow routing metadata through a proxy: [faults].allow = "
        f"['observe'] lacks \"metadata_faults\"")
    assert "links no engine to a [[components]] entry" in target.missing(
        Capability.ENGINE_RESTART)
    assert "lists no [[masters]]" in target.missing(Capability.MASTER_CLUSTER)
    meta = target.metadata_store("etcd")
    with pytest.raises(TargetLacks, match="lacks \"metadata_writes\""):
        meta.put("mooncake/ram/x", b"{}")
    with pytest.raises(TargetLacks, match="lacks \"metadata_writes\""):
        meta.delete("mooncake/ram/x")
    with pytest.raises(TargetLacks, match="routing metadata through"):
        meta.through("127.0.0.1:2")
    observed = manifest(tmp_path, '[etcd]\nendpoints = ["127.0.0.1:1"]\n[[engines]]\n'
                                  'segment = "b"\n[faults]\nallow = ["observe"]\n', name="o.toml")
    assert "observed only" in resolve_target(f"cluster:{observed}").missing(
        Capability.REGISTER_MEMORY)


def test_session_with_cluster_target_is_na_or_usage_error(pytester: pytest.Pytester, tmp_path):
    good = manifest(tmp_path, '[faults]\nallow = ["observe"]\n')
    pytester.makepyfile(test_tiny='''
import pytest

@pytest.mark.mc_requires("engine")
def test_engine(mc_engine):
    mc_engine("x")

@pytest.mark.mc_requires("metadata_faults")
def test_faults():
    pass
''')
    result = pytester.runpytest_subprocess("-p", "pytest_mooncake", f"--mc-target=cluster:{good}",
                                           "-rs", timeout=300)
    result.assert_outcomes(skipped=2)
    assert f"n/a: cluster:{good} lists no [[engines]]" in result.stdout.str()
    bad = manifest(tmp_path, '[[masters]]\nadmin = "nope"\n', name="bad.toml")
    result = pytester.runpytest_subprocess("-p", "pytest_mooncake", f"--mc-target=cluster:{bad}",
                                           timeout=300)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{bad}: field 'masters[0].admin': expected an http" in result.stderr.str()


# ------------------------------------------------------------------ against real 0.3.13 processes


def test_attached_engines_transfer_but_are_never_stopped_or_killed(mooncake_target, mc_etcd,
                                                                 tmp_path):
    meta = mooncake_target.metadata_store("etcd")
    tag = f"{os.getpid()}"
    a = mooncake_target.start_engine(f"cl-a-{tag}", meta)
    b = mooncake_target.start_engine(f"cl-b-{tag}", meta)
    try:
        path = manifest(tmp_path, f'''
[etcd]
endpoints = ["{mc_etcd.endpoints[0]}"]
[[engines]]
segment = "{a.segment}"
control = "127.0.0.1:{a.info['control_port']}"
aliases = ["seg-a"]
[[engines]]
segment = "{b.segment}"
control = "127.0.0.1:{b.info['control_port']}"
[faults]
allow = ["observe", "transfers"]
''')
        target = resolve_target(f"cluster:{path}")
        assert isinstance(target, ClusterTarget)
        cmeta = target.metadata_store("etcd")
        ca = target.start_engine("seg-a", cmeta)
        cb = target.start_engine(b.segment, cmeta)
        assert ca.segment == a.segment and ca.pid == a.pid
        assert ca.descriptor()["name"] == a.segment
        assert ca.write(cb.segment, 64, b"via-manifest").ok
        assert b.local_read(64, 12) == b"via-manifest"
        with pytest.raises(TargetLacks, match="links no \\[\\[components\\]\\] entry, so the run "
                                              "cannot kill it"):
            ca.kill()
        with pytest.raises(TargetLacks, match="cannot restart it"):
            ca.restart()
        with pytest.raises(TargetLacks, match="lists no engine 'seg-z'"):
            target.start_engine("seg-z", cmeta)
        with pytest.raises(TargetLacks, match="lacks \"metadata_writes\""):
            cmeta.put(cmeta.segment_key(a.segment), b"{}")
        assert cmeta.segment_key("seg-a") == f"mooncake/ram/{a.segment}"  # alias -> segment
        ca.stop()
        cb.stop()
        assert a.alive() and b.alive()
        os.kill(a.pid, 0)
        assert a.write(b.segment, 0, b"still-running").ok
    finally:
        a.kill()
        b.kill()


def test_observed_masters_report_a_leader_and_are_never_killed(mooncake_target, tmp_path):
    if mooncake_target.missing(Capability.MASTER_CLUSTER):
        pytest.skip("n/a: " + mooncake_target.missing(Capability.MASTER_CLUSTER))
    real = mooncake_target.master_cluster(masters=2, clients=0)
    try:
        leader = real.leader(timeout=30)
        admins = "\n".join(f'[[masters]]\nadmin = "{m.admin}"\n' for m in real.masters)
        path = manifest(tmp_path, admins + '[faults]\nallow = ["observe"]\n')
        target = resolve_target(f"cluster:{path}")
        observed = target.master_cluster(masters=2, clients=0)
        assert observed.leader(timeout=10) == leader
        assert observed.standbys() == [1 - leader]
        assert observed.key_count(leader) == 0
        assert observed.keys(leader) == []
        with pytest.raises(TargetLacks, match="no key list on a master that is not serving"):
            observed.keys(1 - leader)
        with pytest.raises(TargetLacks, match="no key count on a master that is not serving"):
            observed.key_count(1 - leader)
        with pytest.raises(TargetLacks, match="does not allow draining segments"):
            observed.drain_segment("any")
        with pytest.raises(TargetLacks, match="links no component; the run cannot kill it"):
            observed.kill_master(leader)
        with pytest.raises(TargetLacks, match="exposes no promotability predicate"):
            observed.promotable(1 - leader)
        with pytest.raises(TargetLacks, match="lacks \"store\""):
            target.master_cluster(masters=2, clients=1)
        observed.close()
        assert real.alive(0) and real.alive(1)
    finally:
        real.close()
