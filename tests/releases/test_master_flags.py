"""``--help`` of a gflags program becomes a flag table, and master argv follows that table."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_mooncake.releases.gflags_help import parse_help
from pytest_mooncake.releases.probes import (
    MissingFlag,
    master_argv,
    metric_names,
    parse_config_echo,
)

# The layout gflags prints (flag names and texts made up for the test).
HELP = """\
prog: Warning: SetUsageMessage() never called

  Flags from /src/store/src/master.cpp:
    -alpha_port (Port the alpha server listens on, used by (nested) clients)
      type: int32 default: 9003
    -beta_mode (How beta runs: fast | slow) type: string default: "fast"
    -gamma_dir (Where gamma writes) type: string default: ""
    -delta_ratio (A ratio) type: double
      default: 0.90000000000000002
    -epsilon_on (Whether epsilon is on) type: bool default: false currently: true
    -zeta_text (A long default that wraps) type: string
      default: "a b"



  Flags from /build/gflags-2.1.2/src/gflags.cc:
    -flagfile (load flags from file) type: string default: ""
"""


def test_every_entry_with_type_default_and_source():
    flags = parse_help(HELP)
    assert set(flags) == {"alpha_port", "beta_mode", "gamma_dir", "delta_ratio", "epsilon_on",
                          "zeta_text", "flagfile"}
    assert (flags["alpha_port"].type, flags["alpha_port"].default) == ("int32", "9003")
    assert flags["alpha_port"].description == \
        "Port the alpha server listens on, used by (nested) clients"
    assert flags["beta_mode"].default == "fast"
    assert flags["gamma_dir"].default == ""
    assert flags["delta_ratio"].default == "0.90000000000000002"
    assert flags["epsilon_on"].default == "false"
    assert flags["zeta_text"].default == "a b"
    assert flags["alpha_port"].source == "/src/store/src/master.cpp"
    assert flags["flagfile"].source.endswith("gflags.cc")


def test_text_without_a_flags_section_is_refused():
    with pytest.raises(ValueError, match="no 'Flags from"):
        parse_help("ERROR: unknown command line flag 'help'\n")


FLAGS_0314_LIKE = {n: {} for n in ("rpc_port", "port", "metrics_port", "metrics_host",
                                   "client_active_ttl_sec", "client_ttl", "enable_oplog")}
FLAGS_OLD_LIKE = {n: {} for n in ("port", "metrics_port", "client_ttl")}
BIN = Path("/x/mooncake_master")


def test_argv_spells_settings_as_the_release_does():
    argv, dropped = master_argv(BIN, FLAGS_0314_LIKE, {
        "rpc_port": 1, "metrics_port": 2, "metrics_host": "127.0.0.1", "client_ttl": 5,
        "enable_oplog": True, "cluster_id": None})
    assert argv == ["/x/mooncake_master", "--rpc_port=1", "--metrics_port=2",
                    "--metrics_host=127.0.0.1", "--client_active_ttl_sec=5", "--enable_oplog=true"]
    assert dropped == {}


def test_a_setting_the_release_lacks_is_dropped_with_the_reason_or_refused_when_required():
    argv, dropped = master_argv(BIN, FLAGS_OLD_LIKE, {
        "rpc_port": 1, "metrics_host": "127.0.0.1", "client_ttl": 5, "enable_oplog": False})
    assert argv == ["/x/mooncake_master", "--port=1", "--client_ttl=5"]
    assert dropped == {"metrics_host": "no --metrics_host (mooncake_master --help)",
                       "enable_oplog": "no --enable_oplog (mooncake_master --help)"}
    with pytest.raises(MissingFlag, match="enable_oplog: no --enable_oplog"):
        master_argv(BIN, FLAGS_OLD_LIKE, {"enable_oplog": True}, required=("enable_oplog",))


def test_metric_names_and_config_echo():
    text = "# HELP a_total x\n# TYPE a_total counter\na_total 3\nb_bucket{le=\"1\"} 2\nc 1.5\n"
    assert metric_names(text) == ["a_total", "b_bucket", "c"]
    assert parse_config_echo("max_threads=2, rpc protocol=tcp, etcd_endpoints=, x=a=b") == {
        "max_threads": "2", "rpc protocol": "tcp", "etcd_endpoints": "", "x": "a=b"}
