"""Probes of real releases: what each master's --help lists, what a started master serves, and
a write/read round trip between two engines of the release (0.3.14 through the CUDA stand-in).

The flag sets are compared with the package's record (probed/*.json), so a changed release or
a broken parser shows up here. Marked ``release``: see conftest.py for which releases and why
they may skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from release_choice import selected_releases

from pytest_mooncake.releases import loader
from pytest_mooncake.releases.facts import NotProbed, ProbeFailed, ReleaseFacts, facts_of
from pytest_mooncake.releases.record import recorded, summary

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = [pytest.mark.release, pytest.mark.xdist_group("releases/test_release_probes")]


@pytest.fixture(scope="module")
def live_facts(real_release, mc_etcd, tmp_path_factory):
    """``live_facts(version)``: facts of the release with every live probe run now."""
    got: dict[str, ReleaseFacts] = {}

    def get(version: str) -> ReleaseFacts:
        if version not in got:
            got[version] = facts_of(real_release(version), etcd=mc_etcd.endpoints[0],
                                    refresh=True, workdir=tmp_path_factory.mktemp("probe"))
        return got[version]

    return get


@pytest.mark.parametrize("version", selected_releases())
def test_master_flags_match_the_record(real_release, version):
    env = real_release(version)
    facts = facts_of(env, refresh=True)
    record = recorded(env.spec.key)
    assert record is not None, f"no probed/{env.spec.key}.json: run probe {version} --live --record"
    assert summary(facts)["master_flags"] == record["master_flags"]


def test_0_3_14_master_has_the_new_ha_design_and_no_old_snapshot_flags(real_release):
    facts = facts_of(real_release("0.3.14"), refresh=True)
    assert facts.master_flag("ha_leader_lease_ttl_sec").default == "5"
    assert facts.master_flag("enable_oplog_snapshot") is not None
    assert facts.master_flag("client_ttl") is not None  # kept as an alias
    assert facts.client_ttl_flag == "client_active_ttl_sec"
    for gone in ("enable_snapshot", "enable_snapshot_restore", "snapshot_backup_dir"):
        assert facts.master_flag(gone) is None, gone
    assert not [f for f in facts.master_flags if f.startswith(("snapshot_catalog_", "snapshot_payload_"))]
    assert facts.snapshot_means == ["oplog_snapshot"]
    assert facts.reads_env("MC_TE_METADATA_REFRESH_INTERVAL_SECONDS")


def test_0_3_13_master_has_the_old_snapshot_flags_and_no_lease_ttl(real_release):
    facts = facts_of(real_release("0.3.13.post1"), refresh=True)
    for present in ("enable_oplog", "metrics_host", "enable_snapshot", "enable_snapshot_restore"):
        assert facts.master_flag(present) is not None, present
    assert facts.master_flag("ha_leader_lease_ttl_sec") is None
    assert facts.client_ttl_flag == "client_ttl"
    assert facts.snapshot_means == ["snapshot", "snapshot_restore"]
    assert facts.reads_env("MC_DISABLE_METACACHE")


@pytest.mark.parametrize("version", selected_releases())
def test_a_master_starts_alone_and_in_ha_mode_and_engines_round_trip(live_facts, version):
    facts = live_facts(version)
    data = facts.data
    assert facts.master_starts, data["master"].get("error")
    assert facts.ha_master_starts, data["master_ha"].get("error")
    assert data["master_ha"]["health"]["role"] == "leader"
    assert facts.round_trip, data["engines"]
    assert facts.has_metric("master_key_count")
    assert facts.has_admin_endpoint("/health")
    assert not facts.has_admin_endpoint("/ha/promotable")
    record = recorded(facts.env.spec.key)
    assert record is not None
    assert sorted(facts.descriptor_fields) == record["descriptor_fields"]
    assert data["master"]["admin"] == record["admin"]


def test_0_3_14_engine_round_trip_through_the_stand_in(live_facts, no_real_libcuda):
    facts = live_facts("0.3.14")
    env = facts.env
    assert env.standins == ["libcuda.so.1"]
    assert facts.round_trip, facts.data["engines"]
    assert facts.descriptor_has("metadata_version") and facts.descriptor_has("tcp_data_host")
    stand_in = env.libraries().supplied[0].path
    maps = subprocess.run([str(env.python), "-c", "import mooncake.engine; "
                           "print(open('/proc/self/maps').read())"], env=env.env(),
                          capture_output=True, text=True, timeout=120)
    assert maps.returncode == 0, maps.stderr
    assert str(stand_in) in maps.stdout  # the engine's process runs on the stand-in


def test_facts_are_cached_in_the_environment(real_release):
    env = real_release("0.3.13.post1")
    facts_of(env)
    assert (env.root / "facts.json").is_file()


def _fake_facts(data: dict) -> ReleaseFacts:
    class Env:  # only what ReleaseFacts reads
        distribution, version, root = "mooncake-x", "9.9", Path("/nonexistent")
        master_binary = Path("/x/mooncake_master")

    return ReleaseFacts(Env(), data)  # type: ignore[arg-type]


def test_a_failed_probe_is_never_read_as_absent():
    facts = _fake_facts({"static": {"master_help": {"error": "timed out"},
                                    "python_api": {"engine_error": "ImportError: libcuda.so.1"},
                                    "env_vars": []}})
    with pytest.raises(ProbeFailed, match="timed out"):
        facts.master_flag("enable_oplog")
    with pytest.raises(ProbeFailed, match="libcuda"):
        _ = facts.engine_methods
    with pytest.raises(NotProbed, match="live=True"):
        facts.descriptor_has("tcp_data_host")
    assert facts.present("master_flag", "enable_oplog") is None
    assert facts.present("descriptor_field", "tcp_data_host") is None
    assert facts.present("env_var", "MC_FORCE_TCP") is False


def test_a_lacking_name_gets_a_probed_reason():
    facts = _fake_facts({"static": {"master_help": {"flags": {}}, "python_api": {}, "env_vars": []}})
    assert facts.lacks("master_flag", "enable_oplog") == (
        "mooncake-x 9.9 has no master flag --enable_oplog (probed: mooncake_master --help (gflags))")


def test_the_loader_sees_what_a_fresh_process_sees():
    found = loader.system_libraries(["libc.so.6", "libdoes-not-exist.so.9"])
    assert found["libc.so.6"] and Path(found["libc.so.6"]).name.startswith("libc")
    assert found["libdoes-not-exist.so.9"] is None


def test_0_3_14_transfer_engine_bench_loads_only_with_the_stand_in(real_release, no_real_libcuda):
    env = real_release("0.3.14")
    with_it = subprocess.run([str(env.bench_binary), "--help"], env=env.env(),
                             capture_output=True, text=True, timeout=60)
    assert "Flags from" in with_it.stdout, with_it.stderr
    bare = {k: v for k, v in env.env().items() if k != "LD_LIBRARY_PATH"}
    without = subprocess.run([str(env.bench_binary), "--help"], env=bare, capture_output=True,
                             text=True, timeout=60)
    assert without.returncode == 127 and "libcuda.so.1" in without.stderr
