"""``python -m pytest_mooncake.verbs`` by hand, and the device descriptions it takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from verbs_peers import WRITE, connected_pair

from pytest_mooncake.verbs import DeviceSpec, DeviceSpecError, EmulatedFabric, parse_devices
from pytest_mooncake.verbs.devices import write_tree


def cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_mooncake.verbs", *args],
                          capture_output=True, text=True, timeout=120, check=check, env=env)


def test_device_options_parse_and_bad_ones_are_named():
    specs = parse_devices("mlx5_0, mlx5_1:numa=1:link=ib:state=down:ports=2,"
                          "rxe0:gid=::ffff:10.0.0.1+fe80::1")
    assert specs[0] == DeviceSpec("mlx5_0")
    assert specs[1] == DeviceSpec("mlx5_1", numa_node=1, link_layer="InfiniBand",
                                  port_state="down", ports=2)
    assert specs[2].gids == ("::ffff:10.0.0.1", "fe80::1")
    for text, message in [
        ("mlx5_0,mlx5_0", "given twice: mlx5_0"),
        ("mlx5_0:speed=100", "unknown option"),
        ("mlx5_0:numa", "not key=value"),
        ("mlx5_0:link=roce", "bad value"),
        ("mlx5_0:ports=3", "at most 2"),
        ("0bad", "starting with a letter"),
        ("mlx5_0:gid=not-a-gid", "not an IPv6-form address"),
        ("", "no devices given"),
    ]:
        with pytest.raises(DeviceSpecError, match=message):
            parse_devices(text)


def test_the_tree_has_the_shape_mooncake_resolves(tmp_path):
    write_tree(tmp_path, parse_devices("mlx5_0,mlx5_1:numa=1"))
    pci = Path(os.path.realpath(tmp_path / "sys/class/infiniband/mlx5_1/../.."))
    assert pci.name == "0000:19:00.0" and (pci / "numa_node").read_text() == "1\n"
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "gids/3").read_text() == "0000:0000:0000:0000:0000:ffff:7f00:0101\n"
    assert (port / "gid_attrs/types/3").read_text() == "RoCE v2\n"
    assert os.path.realpath(tmp_path / "dev/infiniband/uverbs1") == "/dev/null"


def test_env_prints_sourceable_variables_a_shell_passes_on(tmp_path):
    run_dir = tmp_path / "rd"
    done = cli("env", "--devices", "mlx5_0,mlx5_1", "--run-dir", str(run_dir), "--seed", "7")
    assert f"clean {run_dir}" in done.stderr
    keys = [line.split("=", 1)[0] for line in done.stdout.splitlines()]
    assert keys == ["MC_VERBS_RUN_DIR", "MC_VERBS_CONTROL", "MC_VERBS_SEED", "LD_LIBRARY_PATH",
                    "LD_PRELOAD"]
    shell = (f'set -a; eval "$({sys.executable} -m pytest_mooncake.verbs env --run-dir '
             f'{tmp_path / "rd2"} --devices mlx5_1)"; set +a; '
             f'exec {sys.executable} -c "import os; print(os.environ[\'MC_VERBS_RUN_DIR\']); '
             f'print(open(\'/sys/class/infiniband/mlx5_1/ports/1/link_layer\').read())"')
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split("\n")
    assert out[:2] == [str(tmp_path / "rd2"), "Ethernet"]
    assert cli("clean", str(tmp_path / "rd2")).returncode == 0
    assert not (tmp_path / "rd2").exists()
    again = cli("env", "--run-dir", str(run_dir), check=False)
    assert again.returncode == 2 and "is not empty" in again.stderr


def test_help_documents_every_subcommand_with_examples():
    out = cli("--help").stdout
    for word in ("env", "ctl", "list", "clean", "build", "examples:", "release ids=2,1"):
        assert word in out
    assert "chaos seed=N" in cli("ctl", "--help").stdout
    assert "--chaos" in cli("env", "--help").stdout
    bad = cli("env", "--devices", "mlx5_0:bogus=1", check=False)
    assert bad.returncode == 2 and "unknown option(s) bogus" in bad.stderr


def test_ctl_and_list_drive_a_running_process(fabric, peers):
    a, b = peers(), peers()
    ea, eb = connected_pair(a, b)
    sock = str(fabric.control_socket(a.pid))
    listed = cli("list", str(fabric.run_dir)).stdout
    assert f"{a.pid}\t{sock}" in listed and "verbs_peer.py" in listed
    assert cli("ctl", sock, "hold", f"qp={ea.qpn}").stdout.startswith("ok rule=1")
    assert ea.post(WRITE, eb, 77, 64)["rc"] == 0
    assert cli("ctl", sock, "wait", "what=held", "min=1").returncode == 0
    assert "wr_id=0x4d" in cli("ctl", sock, "held").stdout
    counters = cli("ctl", sock, "counters").stdout
    assert f"qp qpn={ea.qpn} " in counters and "total posted=1 " in counters
    assert cli("ctl", sock, "release", "ids=all").stdout.startswith("ok released=1")
    assert [w["wr_id"] for w in ea.poll_until(1)] == [77]
    bad = cli("ctl", sock, "release", "ids=5", check=False)
    assert bad.returncode == 1 and "no held completion 5" in bad.stderr
    gone = cli("ctl", str(fabric.run_dir / "ctl" / "1.sock"), "hello", check=False)
    assert gone.returncode == 1 and "no process listens" in gone.stderr


def test_a_run_directory_too_long_for_a_socket_is_refused(tmp_path):
    with pytest.raises(ValueError, match="too long for a unix socket path"):
        EmulatedFabric.create("mlx5_0", run_dir=tmp_path / ("x" * 100))
