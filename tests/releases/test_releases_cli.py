"""``python -m pytest_mooncake.releases``, as a user runs it (a subprocess), on the fake release."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_mooncake.releases", *args],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture
def user_env(own_cache, offline_index) -> dict[str, str]:
    return dict(os.environ)


@pytest.mark.parametrize("command", ["install", "list", "path", "probe", "remove"])
def test_every_command_has_help(command):
    out = cli(command, "--help")
    assert out.returncode == 0
    assert out.stdout.startswith(f"usage: python -m pytest_mooncake.releases {command}")


def test_top_level_help_explains_release_forms_flavours_cache_and_exit_codes():
    out = cli("--help")
    assert out.returncode == 0
    for needle in ("mooncake-FLAVOUR==VERSION", "cuda13", "MC_CACHE_DIR", "exit status",
                   "no-device CUDA driver"):
        assert needle in out.stdout


def test_install_list_path_remove(user_env):
    out = cli("install", "--quiet", "mooncake-non-cuda==0.0.1", env=user_env)
    assert out.returncode == 0, out.stderr
    root = out.stdout.split("\t")[1]
    listed = json.loads(cli("list", "--json", env=user_env).stdout)
    assert [(r["release"], r["path"]) for r in listed] == [("mooncake-non-cuda==0.0.1", root)]
    assert listed[0]["size_bytes"] > 0
    python = cli("path", "mooncake-non-cuda==0.0.1", "--what", "python", env=user_env)
    assert python.stdout.strip() == f"{root}/bin/python"
    assert cli("remove", "mooncake-non-cuda==0.0.1", env=user_env).returncode == 0
    gone = cli("path", "mooncake-non-cuda==0.0.1", env=user_env)
    assert gone.returncode == 1
    assert "is not installed; run" in gone.stderr and "install mooncake-non-cuda==0.0.1" in gone.stderr


def test_a_bad_release_is_a_usage_error_and_a_missing_one_names_pip(user_env):
    bad = cli("install", "mooncake>=0.3", env=user_env)
    assert bad.returncode == 2 and "one exact version" in bad.stderr
    missing = cli("install", "mooncake-non-cuda==0.0.9", env=user_env)
    assert missing.returncode == 3
    assert "No matching distribution found" in missing.stderr and "pip" in missing.stderr
    assert "install --disable-pip-version-check --no-input mooncake-transfer-engine-non-cuda==0.0.9" \
        in missing.stderr
