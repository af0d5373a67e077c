"""``python -m reference_engine.rdma``: exit codes and the printed replay token."""

import subprocess
import sys


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "reference_engine.rdma", *args],
                          capture_output=True, text=True, timeout=120)


def test_run_replay_and_bad_token():
    assert _cli("run", "stale_completion_after_retry").returncode == 0
    bad = _cli("run", "stale_completion_after_retry", "--profile", "legacy")
    assert bad.returncode == 1 and "VIOLATION stale_mutation" in bad.stdout
    token = next(line.split()[-1] for line in bad.stdout.splitlines() if "exact token" in line)
    again = _cli("replay", token)
    assert again.returncode == 1 and "VIOLATION stale_mutation" in again.stdout
    garbage = _cli("replay", "not-a-token")
    assert garbage.returncode == 2 and "not a replay token" in garbage.stderr
    assert "reclaim_with_pending_completions" in _cli("scenarios").stdout
