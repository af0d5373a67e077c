"""scripts/stability_runs.py end to end on the reference engine's two profiles: every (column,
seed) judged in its own session and recorded, the per-seed matrices merged and compared;
a second call judges nothing again; a verdict changed in one stored report makes the runs
disagree (exit 1, naming the cell); a directory of another code's runs is refused.

A small selection (the identity suite, MR-7 and MR-8: MR-7 FAILs on the legacy profile) keeps
it to well under a minute per call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mooncake.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "stability_runs.py"
DEADLINE = 600  # four short sessions; a script that hangs fails instead of stalling CI


def stability(out: Path, *more: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--matrix", "reference-profiles",
           "--seeds", "5,6", "--paths", "suites/metadata/test_identity.py",
           "--allow-uncommitted", *more, "--", "--mc-only=MR-7,MR-8", "-q", "-n", "0",
           "--mc-confirm=0"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE)


def test_runs_are_recorded_merged_compared_and_resumed(tmp_path):
    out = tmp_path / "proof"
    first = stability(out)
    assert first.returncode == 0, first.stdout + first.stderr
    reports = sorted(p.name for p in out.glob("*-seed*.json") if not p.name.startswith("matrix"))
    assert reports == ["reference-seed5.json", "reference-seed6.json",
                       "reference_legacy-seed5.json", "reference_legacy-seed6.json"], reports
    rows = (out / "runs.tsv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("column\tseed\texit"), rows
    assert {r.split("\t")[1] for r in rows[1:]} == {"5", "6"}
    merged = json.loads((out / "matrix-seed6.json").read_text())
    assert set(merged["columns"]) == {"reference", "reference:legacy"}
    assert merged["columns"]["reference:legacy"]["requirements"]["MR-7"]["verdict"] == "FAIL"
    assert "4 of 4 cells agree across 2 runs" in first.stdout, first.stdout

    shown = stability(out, "--table")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("| `reference:legacy`"))
    assert "| 5, 6 |" in row and "1 FAIL, 1 pass; 1 FAIL, 1 pass" in row and "2 of 2 |" in row, row

    again = stability(out)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 of 4 already judged" in again.stdout and "[1/" not in again.stdout, again.stdout

    # one stored cell changed: the runs no longer agree, and the cell is named
    path = out / "reference-seed6.json"
    doc = json.loads(path.read_text())
    doc["requirements"]["MR-8"]["verdict"] = "FAIL"  # a one-target report
    path.write_text(json.dumps(doc))
    differ = stability(out)
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert "differs  [reference] MR-8: pass (seed 5), FAIL (seed 6)" in differ.stdout, \
        differ.stdout


def test_a_directory_of_other_code_is_refused(tmp_path):
    out = tmp_path / "proof"
    out.mkdir()
    (out / "runs.tsv").write_text(
        "column\tseed\texit\twall_s\tstarted_utc\tload_before\tload_after\tcommit\tfingerprint\n"
        "reference\t5\t0\t9\t2026-12-03T00:00:00Z\t0.1\t0.1\tabc1234\t000000000000\n")
    refused = stability(out)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "holds runs of other code (fingerprint ['000000000000']" in refused.stderr
    assert not list(out.glob("*.json")), "a refused call judged something"


def test_bad_seeds_and_unknown_columns_are_named(tmp_path):
    one = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--seeds", "5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert one.returncode == 2 and "give two or more different seeds" in one.stderr
    unknown = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--seeds",
                              "5,6", "--columns", "mooncake==9.9"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "['mooncake==9.9'] not in matrix releases" in \
        unknown.stderr, unknown.stderr


def sessions_of(out: Path) -> list[int]:
    """Pids of pytest sessions whose command line writes into ``out``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(out).encode() in a for a in argv) and b"pytest" in b" ".join(argv) \
                and not any(a.endswith(b"stability_runs.py") for a in argv):
            found.append(int(proc.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_script_leaves_no_session_behind(tmp_path, signum):
    out = tmp_path / "proof"
    # the whole suites, serially: minutes, so a session that outlived its script would still
    # be running when the wait below gives up
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--matrix", "reference-profiles",
           "--seeds", "5,6", "--paths", "suites/", "--allow-uncommitted", "--", "-q", "-n", "0",
           "--mc-confirm=0"]
    script = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sessions_of(out), 60, "the script's first pytest session")
        script.send_signal(signum)
        script.wait(timeout=60)
        wait_until(lambda: not sessions_of(out), 60,
                   f"the session to go with its script (signal {signum})")
    finally:
        script.kill()
        script.wait()
    assert not list(out.glob("*-seed*.json")), "a killed run kept a report"
