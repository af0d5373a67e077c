"""scripts/setup.sh: apt-get only for what is missing, and a held dpkg lock is waited for."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "scripts" / "apt-helpers.sh"
LOCKED = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"


def fake_tool(bindir: Path, name: str, body: str) -> Path:
    """An executable ``name`` in ``bindir`` that appends its argv to ``bindir/NAME.calls``."""
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text(f'#!/bin/bash\necho "$*" >> "{bindir}/{name}.calls"\n{body}\n')
    path.chmod(0o755)
    return path


def calls(bindir: Path, name: str) -> list[str]:
    log = bindir / f"{name}.calls"
    return log.read_text().splitlines() if log.exists() else []


def run_helper(bindir: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", MC_APT_LOCK_POLL="0.05", **env)
    return subprocess.run(["bash", "-c", f"source {HELPERS}; {script}"], env=full,
                          capture_output=True, text=True, timeout=60)


def test_a_held_lock_is_waited_for(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "apt-get", f'n=$(wc -l < "{bindir}/apt-get.calls")\n'
                                 f'if [ "$n" -le 2 ]; then echo "{LOCKED}" >&2; exit 100; fi')
    out = run_helper(bindir, "apt_get install -y libnuma1")
    assert out.returncode == 0, out.stderr
    assert len(calls(bindir, "apt-get")) == 3
    assert "-o DPkg::Lock::Timeout=60 -qq install -y libnuma1" in calls(bindir, "apt-get")[-1]
    assert out.stderr.count("waiting for another apt/dpkg run to release its lock") == 2


def test_a_lock_held_past_the_deadline_fails_with_apts_message(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "apt-get", f'echo "{LOCKED}" >&2; exit 100')
    out = run_helper(bindir, "apt_get update", MC_APT_LOCK_TIMEOUT="0")
    assert out.returncode == 1
    assert "still holds its lock after 0 s" in out.stderr and LOCKED in out.stderr


def test_other_apt_errors_fail_at_once(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "apt-get", 'echo "E: Unable to locate package nope" >&2; exit 100')
    out = run_helper(bindir, "apt_get install -y nope")
    assert out.returncode == 1 and "Unable to locate package nope" in out.stderr
    assert len(calls(bindir, "apt-get")) == 1


def test_a_library_ldconfig_briefly_misses_still_counts_as_present(tmp_path):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "ldconfig", "exit 0")  # lists nothing, as during a package replacement
    libc = next(p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                            "/lib64/libc.so.6", "/usr/lib/libc.so.6") if Path(p).exists())
    assert run_helper(bindir, f"have_library {Path(libc).name}").returncode == 0
    assert run_helper(bindir, "have_library libnot-a-library.so.9").returncode == 1


def test_setup_asks_apt_get_for_nothing_that_is_installed(tmp_path):
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "apt-helpers.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    venv = tmp_path / "venv"
    fake_tool(venv / "bin", "python", "exit 0")
    stamp = hashlib.sha256((tree / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".pytest-mooncake-installed").write_text(stamp + "\n")
    bindir = tmp_path / "bin"
    fake_tool(bindir, "apt-get", "exit 0")
    out = subprocess.run(["bash", str(tree / "scripts" / "setup.sh")], capture_output=True,
                         text=True, timeout=120, env=dict(
                             os.environ, PATH=f"{bindir}:{os.environ['PATH']}", MC_VENV=str(venv),
                             MC_SETUP_RELEASES=""))
    assert out.returncode == 0, out.stderr
    asked = {word for call in calls(bindir, "apt-get") if " install " in f" {call} "
             for word in call.split() if not word.startswith("-") and word not in ("install",)
             and "=" not in word}
    present = {pkg for pkg in asked if installed(pkg)}
    assert present == set(), f"apt-get was asked for installed packages {present}"
    # the venv was current: nothing reinstalled (the cached native build is only asked for)
    assert [c for c in calls(venv / "bin", "python") if "pip" in c.split()] == []
    assert calls(venv / "bin", "python") == ["-m pytest_mooncake.verbs build"]


def installed(package: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() == "install ok installed"
