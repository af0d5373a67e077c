"""A generated region of a Markdown page: the lines between one start-marker line and, after it,
one end-marker line (a marker counts only on a line of its own, so prose may quote it), which a
script rewrites from a stored report and checks with ``--check`` (scripts/judge_mooncake.py,
scripts/judge_rdma_explorations.py; docs/reference/release-matrix.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


class MarkedRegionError(ValueError):
    """A page that cannot take its region: a marker missing, repeated or out of order (the
    message names the page and the marker)."""


@dataclass(frozen=True)
class Markers:
    start: str
    end: str
    append: bool = False
    """A page holding neither marker gets them, around the region, at its end (else that page
    is refused like any other without its markers)."""

    def replace(self, page: str, region: str, where: str = "the page") -> str:
        """``page`` with only the lines between the marker lines replaced by ``region``;
        ``MarkedRegionError`` naming ``where`` and the marker when they are not one start line
        and, after it, one end line."""
        lines = page.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.strip() == self.start]
        ends = [i for i, line in enumerate(lines) if line.strip() == self.end]
        if self.append and not starts and not ends:
            return page.rstrip("\n") + f"\n\n{self.start}\n{region}{self.end}\n"
        wrong = next((f"{len(found)} lines {marker}" if found else f"no line {marker}"
                      for marker, found in ((self.start, starts), (self.end, ends))
                      if len(found) != 1), None)
        if wrong is None and ends[0] < starts[0]:
            wrong = f"its line {self.end} before its line {self.start}"
        if wrong is not None:
            raise MarkedRegionError(f"{where} holds {wrong}: it must hold one line "
                                    f"{self.start} and, after it, one line {self.end}")
        return "".join(lines[: starts[0] + 1]) + region + "".join(lines[ends[0]:])


def update_page(page: Path, markers: Markers, region: str, *, section: str, source: object,
                regenerate: str, check: bool) -> int:
    """Rewrite ``page``'s region as ``region`` (``check``: only compare). Prints what it found;
    returns 0 (up to date, or rewritten), 1 (``check`` and stale: ``regenerate`` says how to
    fix it) or 2 (the page lacks its markers, as ``MarkedRegionError`` says)."""
    current = page.read_text()
    try:
        wanted = markers.replace(current, region, where=str(page))
    except MarkedRegionError as exc:
        print(exc, file=sys.stderr)
        return 2
    if wanted == current:
        print(f"{page}: the {section} is up to date")
        return 0
    if check:
        print(f"{page}: the {section} is stale; run {regenerate}", file=sys.stderr)
        return 1
    page.write_text(wanted)
    print(f"{page}: {section} rewritten from {source}")
    return 0
