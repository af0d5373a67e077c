"""One test per harness fault #12 found in judging real releases, each showing it gone.

- 0.3.10-0.3.12 masters lack ``--enable_oplog`` and ``--metrics_host``: the harness passed them
  always, the masters died with "ERROR: unknown command line flag" and MP tests read FAIL.
- 0.3.11/0.3.12 descriptors have no ``tcp_data_host``: the reference reader connected to the
  segment name as a host (tests/engine/test_peer_locations.py shows the reader's rule; here a
  real 0.3.12 reader shows it is the rule real readers follow).
- 0.3.14 echoes ``client_active_ttl_sec=``, not ``client_ttl=``: the TTL check never matched.
- the capability probe only checked that ``mooncake_master`` is executable, not that it starts;
  a component that does not start was a FAIL inside the test body, not an error.
- the skew matrix ``mixed-engines`` named the installed wheel, so a release's column judged
  0.3.13 in two MR-8 tests.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from pytest_mooncake.fixtures.version_skew import load_matrix
from pytest_mooncake.releases import LocalBuild, facts_of
from pytest_mooncake.runtime.processes import Supervisor
from pytest_mooncake.schemas.shipped_files import shipped_dir
from pytest_mooncake.targets import (
    Capability,
    ComponentStartError,
    TargetContext,
    TargetLacks,
    resolve_target,
    target_identity,
)
from pytest_mooncake.targets.mooncake.install import MooncakeInstall
from pytest_mooncake.targets.mooncake.launchers import LocalLauncher
from pytest_mooncake.targets.mooncake.master_cluster.ha_processes import MooncakeMasterCluster
from pytest_mooncake.targets.mooncake.placements.this_host import MooncakeTarget
from pytest_mooncake.targets.reference import ReferenceTarget
from pytest_mooncake.waits import wait_until

pytestmark = pytest.mark.xdist_group("releases")


@pytest.fixture
def opened(real_release, mc_etcd, tmp_path):
    """``opened("0.3.11.post1")``: that release's target, opened on ``mc_etcd``."""
    targets = []

    def open_release(text: str) -> MooncakeTarget:
        real_release(text)  # installed (or skipped/failed as release_choice says)
        target = resolve_target(f"mooncake=={text}")
        target.open(TargetContext(seed=1, workdir=tmp_path / target.label.replace("=", "_"),
                                  etcd_endpoints=lambda: list(mc_etcd.endpoints)))
        targets.append(target)
        return target

    yield open_release
    for target in targets:
        target.close()


# ----------------------------------------------------------------- unknown master flags


@pytest.mark.release
def test_0_3_11_masters_start_without_the_flags_they_lack(opened):
    target = opened("0.3.11.post1")
    assert target.missing(Capability.MASTER_CLUSTER) is None
    cluster = target.master_cluster(masters=2, clients=1)
    try:
        argv = " ".join(cluster.masters[0].process.argv)
        assert "--enable_oplog" not in argv and "--metrics_host" not in argv, argv
        assert "--enable_ha=true" in argv and f"--cluster_id={cluster.cluster_id}" in argv
        assert "metrics_host" in cluster.dropped and "--help" in cluster.dropped["metrics_host"]
        assert "unknown command line flag" not in cluster.master_log(0)
        leader = cluster.leader(timeout=30)
        assert cluster.client(0).put("k", 64)["ok"] and cluster.key_count(leader) >= 1
    finally:
        cluster.close()


@pytest.mark.release
def test_0_3_11_masters_asked_for_a_flag_they_lack_are_na_naming_the_probe(opened):
    target = opened("0.3.11.post1")
    for options, flag in (({"oplog": True}, "--enable_oplog"),
                          ({"flags": {"ha_leader_lease_ttl_sec": 3}}, "--ha_leader_lease_ttl_sec")):
        with pytest.raises(TargetLacks) as lacks:
            target.master_cluster(masters=1, clients=0, **options)
        assert lacks.value.capability is Capability.MASTER_CLUSTER
        assert f"0.3.11.post1 has no master flag {flag} (probed: mooncake_master --help" \
            in lacks.value.reason


# ----------------------------------------------------------------- the data host of old writers


def _rpc_entry(meta, segment: str) -> dict:
    return json.loads(meta.get(f"mooncake/rpc_meta/{segment}"))


@pytest.mark.release
def test_readers_of_a_0_3_12_writer_connect_where_its_rpc_entry_says(opened, mc_etcd, tmp_path):
    """A real 0.3.12 writer publishes no tcp_data_host; real 0.3.12 readers and the reference
    reader both transfer with it, both fail once its RPC entry names another host, and neither
    takes the segment name for a host."""
    release = opened("0.3.12.post1")
    reference = ReferenceTarget("rfc")
    reference.open(TargetContext(seed=1, workdir=tmp_path / "ref",
                                 etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    meta = release.metadata_store("etcd")
    tag = uuid.uuid4().hex[:6]
    try:
        writer = release.start_engine(f"w-{tag}", meta)
        doc = json.loads(writer.raw_descriptor())
        assert "tcp_data_host" not in doc, sorted(doc)
        for reader in (release.start_engine(f"r-{tag}", meta),
                       reference.start_engine(f"ref-r-{tag}", reference.metadata_store("etcd"))):
            wait_until(lambda r=reader: r.write(writer.segment, 0, b"through rpc_meta").ok, 15,
                       f"{reader.segment} to write into the 0.3.12 writer")
            assert writer.local_read(0, 16) == b"through rpc_meta"
            writer.local_write(0, b"\0" * 16)
        entry = _rpc_entry(meta, writer.segment)
        meta.put(f"mooncake/rpc_meta/{writer.segment}",
                 json.dumps({**entry, "ip_or_host_name": "no-such-host.invalid"}).encode())
        # fresh readers: a real reader caches an RPC entry for its lifetime
        real = release.start_engine(f"r2-{tag}", meta)
        ref = reference.start_engine(f"ref-r2-{tag}", reference.metadata_store("etcd"))
        for reader in (real, ref):
            out = reader.write(writer.segment, 0, b"nowhere")
            assert not out.ok, f"{reader.segment} wrote although the RPC entry names no host"
        assert writer.local_read(0, 7) == b"\0" * 7
        assert "no-such-host.invalid" in ref.write(writer.segment, 0, b"x").error
    finally:
        reference.close()


# ----------------------------------------------------------------- 0.3.14's config echo


@pytest.mark.release
def test_0_3_14_client_ttl_is_passed_and_checked_as_client_active_ttl_sec(opened):
    target = opened("0.3.14")
    cluster = target.master_cluster(masters=1, clients=0, client_ttl=3)
    try:
        argv = cluster.masters[0].process.argv
        assert "--client_active_ttl_sec=3" in argv and not any("--client_ttl" in a for a in argv)
        assert "client_active_ttl_sec=3" in cluster.master_log(0)
    finally:
        cluster.close()


class _Echoing:
    def __init__(self, text: str):
        self.text = text

    def log_text(self) -> str:
        return self.text


def test_an_echo_without_the_ttl_key_or_with_another_value_is_a_start_error(tmp_path):
    cluster = MooncakeMasterCluster.__new__(MooncakeMasterCluster)
    cluster.client_ttl = 3
    cluster._flags = type("F", (), {"client_ttl_flag": "client_active_ttl_sec"})()
    m = type("M", (), {"index": 0})()
    m.process = _Echoing("Master service started on port 5, client_active_ttl_sec=3, x=1\n")
    cluster._check_client_ttl(m)
    for echo, seen in (("client_ttl=3, x=1", "client_active_ttl_sec=None (absent"),
                       ("client_active_ttl_sec=10, x=1", "client_active_ttl_sec=10")):
        m.process = _Echoing(f"Master service started on port 5, {echo}\n")
        with pytest.raises(ComponentStartError, match=seen.replace("(", r"\(")):
            cluster._check_client_ttl(m)


# ----------------------------------------------------------------- a master that does not start

FAKE_HELP = textwrap.dedent("""\
    mooncake_master: fake

      Flags from fake/master.cpp:
        -cluster_id (cluster) type: string default: "x"
        -enable_ha (ha) type: bool default: false
        -etcd_endpoints (etcd) type: string default: ""
        -metrics_port (admin) type: int32 default: 9003
        -rpc_port (rpc) type: int32 default: 50051
    """)


def _fake_build(root: Path) -> LocalBuild:
    """A build whose Python API is complete and whose mooncake_master answers --help but
    exits at once when started."""
    pkg = root / "mooncake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    methods = "\n".join(f"    def {m}(self, *a): return 0" for m in (
        "initialize", "register_memory", "transfer_sync_write", "transfer_sync_read",
        "get_first_buffer_address", "get_rpc_port", "setup", "put", "get", "is_exist", "remove"))
    (pkg / "engine.py").write_text(f"class TransferEngine:\n{methods}\n")
    (pkg / "store.py").write_text(f"class MooncakeDistributedStore:\n{methods}\n")
    master = pkg / "mooncake_master"
    master.write_text("#!/bin/sh\nif [ \"$1\" = --help ]; then cat <<'EOF'\n" + FAKE_HELP
                      + "EOF\nexit 1; fi\necho 'E fake master: cannot bind' >&2\nexit 3\n")
    master.chmod(0o755)
    build = LocalBuild.find(pythonpath=str(root), distribution="mooncake-fake", version="0.0.9")
    assert build is not None
    return build


def test_the_capability_probe_starts_the_master_and_a_start_error_is_no_fail(
        tmp_path, monkeypatch):
    monkeypatch.setenv("MC_CACHE_DIR", str(tmp_path / "cache"))
    build = _fake_build(tmp_path / "install")
    facts = facts_of(build, live=True)
    assert facts.master_flag("rpc_port") is not None  # executable and answering --help
    assert facts.master_starts is False
    assert "exited with 3" in facts.data["master"]["error"], facts.data["master"]
    install = MooncakeInstall("fake", build=build, pythonpath=build.pythonpath,
                              dist_name="mooncake-fake", dist_version="0.0.9")
    launcher = LocalLauncher(install, Supervisor(tmp_path / "logs"), facts)
    with pytest.raises(ComponentStartError, match="mooncake_master 0 of mooncake-fake 0.0.9 at "
                                                  ".* did not start") as err:
        MooncakeMasterCluster(launcher, tmp_path / "c", ["127.0.0.1:1"], masters=1, clients=0,
                              ready_timeout=10)
    assert "cannot bind" in str(err.value)


def test_a_component_start_error_in_a_test_body_is_an_error_verdict(pytester):
    pytester.makepyfile("""
        import pytest
        from pytest_mooncake.targets import ComponentStartError

        @pytest.mark.mc_req("MP-7")
        def test_cluster():
            raise ComponentStartError("mooncake_master 0 did not start: exited with 1")

        @pytest.mark.mc_req("MP-6")
        def test_verdict():
            assert False, "the build misbehaved"
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--mc-report=r.json")
    result.assert_outcomes(failed=2)
    report = json.loads((pytester.path / "r.json").read_text())["requirements"]
    assert report["MP-7"]["verdict"] == "error"
    assert "did not start" in report["MP-7"]["tests"][0]["message"]
    assert report["MP-6"]["verdict"] == "FAIL"


# ----------------------------------------------------------------- roles that follow the column


def test_no_shipped_skew_matrix_names_the_installed_wheel():
    """A role is the column's build ("@target"), a reference profile or a release by version:
    never ``mooncake`` (whatever wheel the plugin's environment holds)."""
    for path in sorted(shipped_dir("skew").glob("*.toml")):
        matrix = load_matrix(path)
        for impl in matrix.implementations.values():
            assert impl.target == "@target" or impl.target.startswith("reference") or \
                "==" in impl.target, f"{path.name}: {impl.name} runs {impl.target!r}"
    mixed = load_matrix(shipped_dir("skew") / "mixed-engines.toml")
    assert all(any(mixed.implementations[i].target == "@target" for _, i in pair.roles)
               for pair in mixed.pairs)


def test_release_pairs_count_in_the_column_they_judge():
    upgrade = load_matrix(shipped_dir("skew") / "release-upgrade.toml")
    (pair,) = upgrade.pairs
    assert target_identity(pair.judged_target) == target_identity("mooncake-cuda13==0.3.14")
    engines = load_matrix(shipped_dir("skew") / "release-engines.toml")
    readers = {target_identity(p.judged_target) for p in engines.pairs}
    assert readers == {target_identity(f"mooncake=={v}") for v in (
        "0.3.10.post2", "0.3.11.post1", "0.3.12.post1", "0.3.13.post1", "0.3.14")}


def test_master_skew_pairs_cover_every_adjacent_release_pair_both_ways():
    releases = ("0.3.10.post2", "0.3.11.post1", "0.3.12.post1", "0.3.13.post1", "0.3.14")
    adjacent = {pair for old, new in zip(releases, releases[1:], strict=False)
                for pair in ((old, new), (new, old))}
    masters = load_matrix(shipped_dir("skew") / "release-master-client.toml")
    assert {(dict(p.roles)["master"], dict(p.roles)["client"]) for p in masters.pairs} == adjacent
    assert all(p.judged_target == masters.implementations[dict(p.roles)["master"]].target
               for p in masters.pairs)
    wire = load_matrix(shipped_dir("skew") / "master-wire-skew.toml")
    roles = {(dict(p.roles)["master"], dict(p.roles)["client"]) for p in wire.pairs}
    assert roles == {("reference", r) for r in releases} | {(r, "reference") for r in releases}
