"""The plugin as another project gets it (#15 item 4): ``scripts/wheel_check.py`` builds the
wheel, installs it with its declared dependencies into a fresh virtualenv outside the repository,
and from a project directory that is not this repository runs a suite file whose tests name a
shipped skew matrix (``rolling-upgrade``) over a shipped run matrix (``reference-profiles``).

The dependencies come from a wheelhouse built once per dependency set (the first run needs the
package index); the wheel itself is built and installed fresh every time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 1800.0


def test_the_wheel_works_from_a_project_outside_the_repo(tmp_path: Path) -> None:
    work = tmp_path / "wheel-check"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "wheel_check.py"),
                           "--keep", str(work)], capture_output=True, text=True,
                          timeout=DEADLINE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((work / "project" / "report.json").read_text())
    assert report["schema_version"] == 2 and report["matrix"] == "reference-profiles"
    for column in ("reference", "reference:legacy"):
        cell = report["columns"][column]["requirements"]["MR-8"]
        assert cell["verdict"] == "pass", (column, cell)
        assert all("test_rolling_upgrade.py::" in t["nodeid"] for t in cell["tests"])
    site = next((work / "venv" / "lib").glob("python3*/site-packages"))
    shipped = site / "pytest_mooncake" / "data"
    for name in ("skew/rolling-upgrade.toml", "matrices/release.toml", "clusters/example.toml",
                 "verdicts/mooncake.toml", "report.schema.json", "allure/allurerc.json",
                 "expectations/mooncake-0.3.13.post1@ha-oplog.toml", "expectations/releases.toml"):
        assert (shipped / name).is_file(), f"the wheel lacks pytest_mooncake/data/{name}"
    assert not (site / "fixtures").exists()
