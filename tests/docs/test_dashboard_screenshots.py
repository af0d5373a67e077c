"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) screenshots the
grid of the stored release matrix, a FAIL cell opened, and the diff of the two stored reports.

The pictures are checked for what a person would see: the grid's pass and FAIL colours, a
panel that opens over the right of the page when a cell's link is followed (CSS ``:target``, no
script), the diff's outline of a changed cell. ``MC_DOCS_FIGURE=1`` also writes the picture of the matrix judged per deployment
profile (fixtures/reports/releases-by-profile.json) to docs/img/dashboard.png, the README's figure. Skipped, saying why, without Chromium.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from pytest_mooncake.report import dashboard

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("docs/test_dashboard_screenshots")

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "fixtures" / "reports"
FIGURE = ROOT / "docs" / "img" / "dashboard.png"
WIDTH, HEIGHT = 1500, 1000
DEADLINE_S = 120
PASS_RGB, FAIL_RGB, CHANGED_RGB = (0xC8, 0xE6, 0xC9), (0xFF, 0xCD, 0xD2), (0x09, 0x69, 0xDA)
FAIL_CELL = "c0-5-MR-9"
"""MR-9 on 0.3.13.post1 in releases.json: FAIL 1/10, with n/a tests beside the failed one."""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("no headless Chromium here (Debian package chromium; scripts/setup.sh "
                    "installs it unless MC_SETUP_CHROMIUM=0)")
    return found


def screenshot(url: str, out: Path, profile: Path) -> np.ndarray:
    """The page at ``url`` as Chromium draws it at WIDTH x HEIGHT, as RGB 0-255."""
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={out}", url]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0 and out.is_file(), f"chromium exited {proc.returncode}: {log[-2000:]}"
    pixels = (image.imread(out)[:, :, :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (HEIGHT, WIDTH), pixels.shape
    return pixels


def share(pixels: np.ndarray, rgb: tuple[int, int, int]) -> float:
    """The fraction of pixels of exactly this colour."""
    return float(np.all(pixels == np.array(rgb), axis=-1).mean())


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dashboard")
    [grid] = dashboard.write([REPORTS / "releases.json"], out / "grid")
    diff_page, *_ = dashboard.write([REPORTS / "release.json", REPORTS / "releases.json"], out / "diff")
    [profiles] = dashboard.write([REPORTS / "releases-by-profile.json"], out / "profiles")
    return {"grid": grid, "diff": diff_page, "profiles": profiles, "shots": out}


def test_the_grid_shows_pass_and_fail_cells(pages, tmp_path):
    pixels = screenshot(pages["grid"].as_uri(), pages["shots"] / "grid.png", tmp_path / "profile")
    assert share(pixels, FAIL_RGB) > 0.05 and share(pixels, PASS_RGB) > 0.05, \
        (share(pixels, FAIL_RGB), share(pixels, PASS_RGB))


def test_the_readme_figure_shows_every_release_in_both_profiles(pages, tmp_path):
    """The README's figure: the stored matrix judged per deployment profile (every release as
    ha-oplog and @defaults), its columns named with the profile."""
    html = pages["profiles"].read_text()
    assert "0.3.13.post1@defaults" in html and "0.3.14@defaults" in html
    pixels = screenshot(pages["profiles"].as_uri(), pages["shots"] / "profiles.png",
                        tmp_path / "profile")
    assert share(pixels, FAIL_RGB) > 0.05 and share(pixels, PASS_RGB) > 0.05, \
        (share(pixels, FAIL_RGB), share(pixels, PASS_RGB))
    if os.environ.get("MC_DOCS_FIGURE") == "1":
        shutil.copyfile(pages["shots"] / "profiles.png", FIGURE)


def test_an_opened_fail_cell_shows_its_tests_over_the_grid(pages, tmp_path):
    grid = screenshot(pages["grid"].as_uri(), pages["shots"] / "grid-closed.png", tmp_path / "p1")
    opened = screenshot(f"{pages['grid'].as_uri()}#{FAIL_CELL}", pages["shots"] / "cell.png",
                        tmp_path / "p2")
    right = slice(int(WIDTH * 0.55), WIDTH)
    assert np.abs(opened[:, right] - grid[:, right]).sum(axis=-1).astype(bool).mean() > 0.3, \
        "following a cell's link did not open its panel"
    assert share(opened[:, right], (0x0D, 0x11, 0x17)) > 0.01, "no replay command in the panel"


def test_the_diff_lists_what_changed_and_opens_it(pages, tmp_path):
    overview = screenshot(pages["diff"].as_uri(), pages["shots"] / "diff.png", tmp_path / "p1")
    assert share(overview, CHANGED_RGB) > 0.0003, "no changed cell outlined at the top of the diff"
    html = pages["diff"].read_text()
    start = html.index('href="#', html.index('<td class="cell changed">')) + len('href="#')
    anchor = html[start:html.index('"', start)]
    opened = screenshot(f"{pages['diff'].as_uri()}#{anchor}", pages["shots"] / "diff-cell.png",
                        tmp_path / "p2")
    right = slice(int(WIDTH * 0.55), WIDTH)
    assert np.abs(opened[:, right] - overview[:, right]).sum(axis=-1).astype(bool).mean() > 0.3
    assert share(opened[:, right], FAIL_RGB) > 0 and share(opened[:, right], PASS_RGB) > 0, \
        "the panel shows no verdict before and after"
