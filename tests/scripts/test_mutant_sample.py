"""CI's share of the mutant catalogue: a rotating sample of mutants must all die.

The whole catalogue takes about half an hour (docs/reference/mutants.md); CI draws a few mutants
each day (a new draw every day), each judged against the suites as they are then. The
seed is the UTC day number unless ``MC_MUTANTS_SEED`` names one; it is printed, and the failure
message says how to replay the sample.

No baseline run here (``--no-baseline``): the same CI run proves the unmutated tree's suites pass
on the reference (tests/test_detection_proof.py) and runs the project's tests, and a baseline
of a mechanical mutant's suites doubled the cost of its sample (433 s in one CI run). Each kill
is confirmed instead (``--confirm``): the killing test is run once on the unmutated tree and
must pass there, so a test that fails without any mutant kills nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = 3
MECHANICAL_SAMPLE = 1
JUDGED = ROOT / "mutants" / "mechanical" / "judged.json"
"""The stored mechanical run: CI draws only from the mechanical mutants it judged killed (a kill
lost is a regression of the suites); its survivors are triaged into tests or
``equivalent.toml`` by hand, never sampled into a red CI by chance."""


def sample_seed() -> int:
    chosen = os.environ.get("MC_MUTANTS_SEED", "")
    if chosen:
        try:
            return int(chosen)
        except ValueError:
            raise pytest.UsageError(f"MC_MUTANTS_SEED={chosen!r} is not an integer") from None
    return datetime.datetime.now(datetime.UTC).date().toordinal()


def unconfirmed(doc: dict) -> list[str]:
    """Kills whose killing test failed on the unmutated tree too (``--confirm``): they judged
    nothing about the mutant."""
    return [f"{m['id']}: killed by {m['killed_by']}, which fails without the mutant as well"
            for m in doc["mutants"] if m.get("confirmed") is False]


@pytest.mark.xdist_group("mutants")
def test_a_rotating_sample_of_the_catalogue_is_killed(tmp_path):
    seed = sample_seed()
    result = tmp_path / "mutants.json"
    replay = (f"MC_MUTANTS_SEED={seed} or: .venv/bin/python scripts/mutants.py "
              f"--sample {SAMPLE} --seed {seed}")
    print(f"mutant sample seed {seed} (replay: {replay})")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--sample", str(SAMPLE),
         "--seed", str(seed), "-j", "1", "--no-baseline", "--confirm", "--python", sys.executable,
         "--json", str(result)],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)
    out = proc.stdout[-6000:] + proc.stderr[-4000:]
    assert result.exists(), f"no result (exit {proc.returncode}); {replay}\n{out}"
    doc = json.loads(result.read_text())
    assert len(doc["mutants"]) == SAMPLE and doc["seed"] == seed
    alive = [m["id"] for m in doc["mutants"] if m["status"] not in ("killed", "killed (hang)")]
    assert not alive, f"mutants not killed: {alive}; {replay}\n{out}"
    assert not unconfirmed(doc), unconfirmed(doc)
    assert proc.returncode == 0, out


@pytest.mark.xdist_group("mutants")
def test_a_rotating_sample_of_the_mechanical_kills_stays_killed(tmp_path):
    seed = sample_seed()
    result = tmp_path / "mechanical.json"
    replay = (f"MC_MUTANTS_SEED={seed} or: .venv/bin/python scripts/mutants.py --source "
              f"mechanical --killed-before {JUDGED.relative_to(ROOT)} --sample "
              f"{MECHANICAL_SAMPLE} --seed {seed}")
    print(f"mechanical mutant sample seed {seed} (replay: {replay})")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutants.py"), "--source", "mechanical",
         "--killed-before", str(JUDGED), "--sample", str(MECHANICAL_SAMPLE), "--seed",
         str(seed), "--suites-only", "-j", "1", "--no-baseline", "--confirm", "--python",
         sys.executable, "--json", str(result)],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)
    out = proc.stdout[-6000:] + proc.stderr[-4000:]
    assert result.exists(), f"no result (exit {proc.returncode}); {replay}\n{out}"
    doc = json.loads(result.read_text())
    assert len(doc["mutants"]) == MECHANICAL_SAMPLE, out
    alive = [m["id"] for m in doc["mutants"] if m["status"] not in ("killed", "killed (hang)")]
    assert not alive, f"mechanical mutants no longer killed: {alive}; {replay}\n{out}"
    assert not unconfirmed(doc), unconfirmed(doc)
