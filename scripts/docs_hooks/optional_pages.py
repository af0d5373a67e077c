"""MkDocs hook: drop nav entries of pages other branches are still writing.

The nav in mkdocs.yml names every page the site will have, including ones that land from other
branches (``OPTIONAL``). ``mkdocs build --strict`` fails on a nav entry whose file is missing,
so until such a page exists its entry is left out; every other missing page still fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPTIONAL = frozenset({
    "verdicts.md", "ci.md", "master-wire.md", "deployment-profiles.md", "backends.md",
    "containers.md", "rdma-exploration.md",
})
"""Pages written on other branches; the lead merges them into docs/."""


def present(nav: list[Any], docs_dir: Path) -> list[Any]:
    """``nav`` without entries naming an absent OPTIONAL page (and without sections left
    empty by that)."""
    kept: list[Any] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            value = present(value, docs_dir)
            if not value:
                continue
            entry = {next(iter(entry)): value}
        elif isinstance(value, str) and value in OPTIONAL and not (docs_dir / value).exists():
            continue
        kept.append(entry)
    return kept


def on_config(config: Any) -> Any:
    if config.nav:
        config.nav = present(config.nav, Path(config.docs_dir))
    return config
