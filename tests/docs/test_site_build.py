"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor, a nav
entry without a page, a page outside the nav fails), and its reference pages are generated from
the code, not typed."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("docs/test_site_build")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 300

def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "docs_hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once per session: xdist workers share the run's base directory, and
    the first to take the lock builds it for the others."""
    if importlib.util.find_spec("mkdocs") is None:
        message = "mkdocs is not installed (the dev extra has it; scripts/setup.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI installs it, so its absence is a failure there")
        pytest.skip(message)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out, built = shared / "docs-site", shared / "docs-site.built"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                                   "--site-dir", str(out)], cwd=ROOT, capture_output=True,
                                  text=True, timeout=DEADLINE_S,
                                  env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
            assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
            built.touch()
    return out


def test_the_site_builds_strictly_with_every_section(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "how-to/judge-a-release/index.html",
                 "reference/release-matrix/index.html", "explanation/verdict-rule/index.html",
                 "about/index.html"):
        assert (site / page).is_file(), f"{page} missing from the built site"
    assert (site / "img" / "dashboard.png").is_file()


def test_reference_pages_are_generated_from_the_code(site: Path) -> None:
    from pytest_mooncake.config.options import OPTIONS

    options = (site / "reference" / "options" / "index.html").read_text()
    for option in OPTIONS:
        assert f"<code>{option.flag}</code>" in options and f"<code>{option.ini}</code>" in options, option
    pages = load_hook("reference_pages")
    fixtures = (site / "reference" / "fixtures" / "index.html").read_text()
    names = [name for name, *_ in pages.fixtures()]
    assert {"mc_engine", "mc_target", "mc_completions", "mc_chaos"} <= set(names)
    assert "no docstring" not in fixtures and all(f"<code>{n}</code>" in fixtures for n in names)
    capabilities = (site / "reference" / "capabilities" / "index.html").read_text()
    assert all(f"<code>{value}</code>" in capabilities for _, value, _ in pages.capabilities())
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for module in pages.command_modules():
        assert f"python -m {module}" in cli, module
    assert "usage: python -m pytest_mooncake.verbs env" in cli
    schema = (site / "reference" / "report-schema" / "index.html").read_text()
    assert "schema_version" in schema and "fail_on" in schema
    assert not (ROOT / "docs" / "reference" / "options.md").exists(), "generated pages are not committed"


def test_the_cluster_file_shown_is_the_shipped_one(site: Path) -> None:
    """The how-to includes the shipped example file itself (a snippet), so it cannot drift."""
    page = (site / "how-to" / "chaos-on-a-cluster" / "index.html").read_text()
    assert "mooncake_ed25519" in page and "kill:engine" in page


def test_pages_of_other_branches_are_left_out_of_the_nav_until_they_exist(tmp_path: Path) -> None:
    hook = load_hook("optional_pages")
    (tmp_path / "ci.md").write_text("# CI\n")
    nav = [{"Home": "index.md"}, {"How-to": [{"CI": "ci.md"}, {"Containers": "containers.md"}]},
           {"Later": [{"Backends": "backends.md"}]}, {"Mine": "mine.md"}]
    assert hook.present(nav, tmp_path) == [{"Home": "index.md"}, {"How-to": [{"CI": "ci.md"}]},
                                           {"Mine": "mine.md"}]
