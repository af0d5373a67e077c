"""Release environments are created once, atomically, reused offline, and fail with pip's words.

These install a fake release (a real wheel from a local find-links directory, see
fake_release.py) into a private cache, so they need no network and take seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import textwrap

import pytest
from fake_release import offline_pip_env

from pytest_mooncake.releases import (
    ReleaseFetchError,
    catalog,
    ensure_env,
    envs,
    find_env,
    remove_env,
)
from pytest_mooncake.releases.pipinstall import pip_argv
from pytest_mooncake.releases.spec import parse_spec

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("releases/test_release_envs")

FAKE = "mooncake-non-cuda==0.0.1"


def _manifest_mtime(env) -> int:
    return (env.root / envs.MANIFEST).stat().st_mtime_ns


@pytest.fixture(scope="module")
def installed(fake_wheels, tmp_path_factory):
    """The fake release installed once into a module-private cache (tests that only read it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        for key, value in offline_pip_env(fake_wheels).items():
            mp.setenv(key, value)
        envs._plan.cache_clear()
        said: list[str] = []
        env = ensure_env(FAKE, progress=said.append)
        yield env, said
    envs._plan.cache_clear()


def test_install_records_what_the_release_links_and_reuses_it_without_pip(installed, tmp_path,
                                                                          monkeypatch):
    env, said = installed
    assert any(m.startswith("creating") for m in said)
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    assert env.root == envs.releases_root() / f"non-cuda-0.0.1-{tag}"
    assert env.version == "0.0.1" and env.flavour == "non-cuda"
    assert env.manifest["driver_imports"] == {"engine.so": ["cuInit"]}
    assert "libcuda.so.1" in env.manifest["external"]
    assert env.manifest["pip_command"] == shlex.join(
        [*pip_argv(str(env.python)), "install", "mooncake-transfer-engine-non-cuda==0.0.1"])
    assert env.master_binary == env.package_dir / "mooncake_master"
    assert env.bench_binary is None
    # files written during the build name the final place, not the build directory
    assert f'VIRTUAL_ENV="{env.root}"' in (env.root / "bin" / "activate").read_text()
    assert ".build-" not in (env.root / "pyvenv.cfg").read_text()
    # a second call touches neither pip nor the environment (pip could not install anything now)
    empty = tmp_path / "empty-index"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    stamp = _manifest_mtime(env)
    again_said: list[str] = []
    again = ensure_env(FAKE, progress=again_said.append)
    assert again.root == env.root and _manifest_mtime(again) == stamp and again_said == []


def test_offline_reuse_picks_the_installed_flavour_without_asking_pip(installed, monkeypatch):
    env, _ = installed

    def no_network(*_a, **_k):
        raise AssertionError("asked pip for the versions of an installed release")

    monkeypatch.setattr(catalog, "pip_index_versions", no_network)
    monkeypatch.setenv("PIP_FIND_LINKS", "/nonexistent")
    assert ensure_env("0.0.1").root == env.root
    assert find_env("mooncake==0.0.1").root == env.root


def test_driver_environment(installed, no_real_libcuda, monkeypatch):
    env, _ = installed
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    got = env.env({"EXTRA": "1"})
    assert got["MC_TCP_BIND_ADDRESS"] == "127.0.0.1"
    assert got["VIRTUAL_ENV"] == str(env.root)
    assert got["PATH"].split(os.pathsep)[0] == str(env.root / "bin")
    assert "PYTHONPATH" not in got and got["EXTRA"] == "1"
    assert got["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(env.libraries().supplied[0].path.parent)
    assert env.env(bind_address="127.0.0.2")["MC_TCP_BIND_ADDRESS"] == "127.0.0.2"


KILL_AT = textwrap.dedent("""
    import os, signal, sys
    from pytest_mooncake.releases import ensure_env
    def progress(msg):
        print(msg, flush=True)
        if msg.startswith(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
    ensure_env(sys.argv[1], progress=progress)
""")


@pytest.mark.parametrize("moment", ["pip install", "scanning"])
def test_a_build_killed_midway_is_never_reused(own_cache, offline_index, moment):
    """SIGKILL after the venv exists ("pip install") and after the release is in it
    ("scanning"): the half-made environment is neither found nor reused, and is removed."""
    died = subprocess.run([sys.executable, "-c", KILL_AT, FAKE, moment], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert died.returncode == -9, died.stderr
    leftovers = list((own_cache / "releases").glob(".non-cuda-0.0.1-*.build-*"))
    assert leftovers, "the killed build left no directory behind (nothing was tested)"
    assert find_env(FAKE) is None
    env = ensure_env(FAKE)
    assert env.version == "0.0.1"
    assert not list((own_cache / "releases").glob(".non-cuda-0.0.1-*.build-*"))


def test_an_incomplete_environment_in_place_is_rebuilt(own_cache, offline_index):
    root = envs.env_dir(envs.as_spec(FAKE, ask_pip=False))
    (root / "bin").mkdir(parents=True)
    (root / envs.MANIFEST).write_text(json.dumps({"format": -1}))
    assert find_env(FAKE) is None
    env = ensure_env(FAKE)
    assert env.root == root and env.manifest["format"] == envs.FORMAT


INSTALL = textwrap.dedent("""
    import sys
    from pytest_mooncake.releases import ensure_env
    env = ensure_env(sys.argv[1], progress=lambda m: print("progress:", m, flush=True))
    print("root:", env.root, flush=True)
""")


def test_two_processes_asking_at_once_install_once(own_cache, offline_index):
    procs = [subprocess.Popen([sys.executable, "-c", INSTALL, FAKE], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
    roots = {line for out, _ in outs for line in out.splitlines() if line.startswith("root:")}
    assert len(roots) == 1
    creations = [line for out, _ in outs for line in out.splitlines() if "creating" in line]
    assert len(creations) == 1, outs


def test_an_unknown_version_fails_with_pips_own_words_and_the_command(own_cache, offline_index):
    with pytest.raises(ReleaseFetchError) as err:
        ensure_env("mooncake-non-cuda==0.0.9")
    text = str(err.value)
    assert "No matching distribution found for mooncake-transfer-engine-non-cuda==0.0.9" in text
    assert "the package index has no such release" in text
    assert "pip" in err.value.command and err.value.command.endswith(
        "install --disable-pip-version-check --no-input mooncake-transfer-engine-non-cuda==0.0.9")
    assert not err.value.unreachable
    assert [p.name for p in (own_cache / "releases").iterdir() if not p.name.endswith(".lock")] == []


def test_an_unreachable_index_says_so(own_cache, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connections are refused
    for key, value in {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": f"http://127.0.0.1:{port}/simple",
                       "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", "PIP_RETRIES": "1",
                       "PIP_TIMEOUT": "3"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    with pytest.raises(ReleaseFetchError) as err:
        ensure_env("mooncake-non-cuda==0.0.1")
    assert err.value.unreachable
    assert "pip cannot reach its package index" in str(err.value)
    assert "mooncake-transfer-engine-non-cuda==0.0.1" in err.value.command


def test_remove_env(own_cache, offline_index):
    env = ensure_env(FAKE)
    assert remove_env(FAKE) == env.root
    assert not env.root.exists() and find_env(FAKE) is None
    assert remove_env(FAKE) is None


def test_the_default_flavour_of_a_version_the_table_lacks_is_asked_of_pip(offline_index):
    catalog.pip_index_versions.cache_clear()
    try:
        assert catalog.resolve(parse_spec("0.0.3")).flavour == "cuda13"  # published only so
        assert catalog.resolve(parse_spec("0.0.1")).flavour == "non-cuda"
    finally:
        catalog.pip_index_versions.cache_clear()

