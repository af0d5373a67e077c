"""The README documents every option, and CI runs exactly the README's test command."""

from pathlib import Path

from pytest_mooncake.config.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_and_ini_key_is_documented() -> None:
    """In the README or a page of docs/ (where the README is moving)."""
    readme = "\n".join(p.read_text() for p in [ROOT / "README.md",
                                               *sorted((ROOT / "docs").rglob("*.md"))])
    for opt in OPTIONS:
        assert f"`{opt.flag}" in readme, f"README does not document {opt.flag}"
        assert f"`{opt.ini}`" in readme, f"README does not document ini key {opt.ini}"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
          if ln.strip() and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert ci == ["bash scripts/run-tests.sh"]
    assert "\nbash scripts/run-tests.sh\n" in readme
    assert "\nbash scripts/run-suites.sh\n" in readme


def test_test_module_basenames_are_unique() -> None:
    """pytest's default import mode needs unique basenames across tests/ and suites/."""
    seen: dict[str, Path] = {}
    for path in sorted(list((ROOT / "tests").rglob("test_*.py")) + list((ROOT / "suites").rglob("test_*.py"))):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a basename"
        seen[path.name] = path
