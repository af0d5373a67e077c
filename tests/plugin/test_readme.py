"""The docs document every option, and CI runs exactly the README's test command.

The options page is generated from ``OPTIONS`` when the site is built
(``scripts/docs_hooks/reference_pages.py``); this checks the generator leaves none out without
building the site (tests/docs/test_site_build.py checks the built page)."""

import importlib.util
from pathlib import Path

from pytest_mooncake.config.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_and_ini_key_is_documented() -> None:
    spec = importlib.util.spec_from_file_location(
        "reference_pages", ROOT / "scripts" / "docs_hooks" / "reference_pages.py")
    pages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pages)
    page = pages.options_page()
    for opt in OPTIONS:
        assert f"`{opt.flag}`" in page, f"the options page does not document {opt.flag}"
        assert f"`{opt.ini}`" in page, f"the options page does not document ini key {opt.ini}"
        assert f"`{opt.default}`" in page or not opt.default, f"{opt.flag}'s default is missing"


def test_ci_runs_the_readme_test_command() -> None:
    """README.md and docs/getting-started.md both hold the two commands; .ci/run is the second."""
    readme = (ROOT / "README.md").read_text()
    getting_started = (ROOT / "docs" / "getting-started.md").read_text()
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
          if ln.strip() and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert ci == ["bash scripts/run-tests.sh"]
    assert "\nbash scripts/run-tests.sh\n" in readme
    assert "\nbash scripts/run-suites.sh\n" in readme
    for command in ("\nbash scripts/run-tests.sh\n", "\nbash scripts/run-suites.sh\n"):
        assert command in getting_started, f"docs/getting-started.md lacks {command.strip()!r}"
    assert len(readme.splitlines()) <= 250, "the README stays short: details go to docs/"


def test_test_module_basenames_are_unique() -> None:
    """pytest's default import mode needs unique basenames across tests/ and suites/."""
    seen: dict[str, Path] = {}
    for path in sorted(list((ROOT / "tests").rglob("test_*.py")) + list((ROOT / "suites").rglob("test_*.py"))):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a basename"
        seen[path.name] = path
