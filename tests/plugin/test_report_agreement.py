"""``report agree``: N runs of one matrix agree when every (column, requirement) cell has one
verdict in all of them; intermittent is a verdict like any other."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_mooncake.report.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "fixtures" / "reports" / "releases.json"


def _run(tmp_path: Path, name: str, seed: int, verdicts: dict[str, str],
         label: str = "mooncake==1") -> Path:
    doc = {"schema_version": 2, "started": "2026-12-02T00:00:00+00:00", "duration_s": 1.0,
           "seed": seed, "target": label, "target_version": "1",
           "requirements": {req: {"verdict": v, "tests": []} for req, v in verdicts.items()}}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_three_runs_with_one_verdict_per_cell_agree(tmp_path, capsys) -> None:
    cells = {"CO-3": "FAIL", "CO-5": "intermittent", "CO-9": "pass", "CO-11": "n/a"}
    runs = [_run(tmp_path, f"r{i}.json", seed, cells) for i, seed in enumerate((1, 2, 3))]
    assert main(["agree", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert "3 reports, seeds 1, 2, 3" in out
    assert "4 of 4 cells agree across 3 runs (1 column(s): mooncake==1)" in out
    assert "differs" not in out


def test_a_cell_seen_two_ways_or_judged_in_some_runs_only_differs(tmp_path, capsys) -> None:
    a = _run(tmp_path, "a.json", 11, {"CO-3": "FAIL", "CO-5": "intermittent", "CO-6": "pass"})
    b = _run(tmp_path, "b.json", 12, {"CO-3": "FAIL", "CO-5": "FAIL", "CO-6": "pass"})
    c = _run(tmp_path, "c.json", 13, {"CO-3": "FAIL", "CO-5": "intermittent"})
    assert main(["agree", str(a), str(b), str(c)]) == 1
    out = capsys.readouterr().out
    assert ("  differs  [mooncake==1] CO-5: intermittent (seed 11), FAIL (seed 12), "
            "intermittent (seed 13)") in out
    assert ("  differs  [mooncake==1] CO-6: pass (seed 11), pass (seed 12), not judged "
            "(seed 13)") in out
    assert "1 of 3 cells agree across 3 runs" in out


def test_a_matrix_report_is_compared_column_by_column(capsys) -> None:
    assert main(["agree", str(RELEASES), str(RELEASES)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(RELEASES.read_text())
    n = sum(len(c["requirements"]) for c in doc["columns"].values())
    assert f"{n} of {n} cells agree across 2 runs ({len(doc['columns'])} column(s)" in out
    assert main(["agree", str(RELEASES), str(RELEASES), "--column", "0.3.14"]) == 0
    assert "(1 column(s): mooncake-cuda13==0.3.14)" in capsys.readouterr().out


def test_one_report_is_a_usage_error(tmp_path, capsys) -> None:
    only = _run(tmp_path, "a.json", 1, {"CO-3": "pass"})
    assert main(["agree", str(only)]) == 2
    assert "agree needs two reports or more" in capsys.readouterr().err


STABILITY = ROOT / "fixtures" / "reports" / "stability"


def test_the_stored_proof_runs_agree_per_release(capsys) -> None:
    """The proof of docs/verdict-stability.md: the CO suite on each release with three seeds
    (fixtures/reports/stability/), one verdict per cell in every run."""
    by_release: dict[str, list[Path]] = {}
    for path in sorted(STABILITY.glob("rdma-*-seed*.json")):
        by_release.setdefault(path.name.split("-seed")[0], []).append(path)
    assert len(by_release) == 3 and all(len(p) == 3 for p in by_release.values()), by_release
    for release, paths in by_release.items():
        assert main(["agree", *map(str, paths)]) == 0, (release, capsys.readouterr().out)
        assert "11 of 11 cells agree across 3 runs" in capsys.readouterr().out


def test_the_release_matrix_proof_at_1e34746_agrees_in_every_column(capsys) -> None:
    """docs/verdict-stability.md's runs at 1e34746 (`scripts/stability_runs.py`, five columns of
    the release matrix, seeds 1101, 2202, 3303, `-n 4`): every column's three runs agree in all
    39 cells, and no failed run's message shows a harness symptom."""
    proof = STABILITY / "proof-1e34746"
    by_column: dict[str, list[Path]] = {}
    for path in sorted(proof.glob("*-seed*.json")):
        by_column.setdefault(path.name.split("-seed")[0], []).append(path)
    assert sorted(by_column) == ["mooncake-cuda13_0.3.14", "mooncake_0.3.13.post1",
                                 "mooncake_0.3.13.post1_defaults", "reference",
                                 "reference_legacy"], by_column
    for column, paths in by_column.items():
        assert len(paths) == 3, (column, paths)
        assert main(["agree", *map(str, paths)]) == 0, (column, capsys.readouterr().out)
        assert "39 of 39 cells agree across 3 runs" in capsys.readouterr().out
    every = [str(p) for paths in by_column.values() for p in paths]
    assert main(["failures", "--harness", *every]) == 0, capsys.readouterr().out
    capsys.readouterr()
