"""``python -m pytest_mooncake.report html REPORT.json [REPORT2.json] -o DIR``: a static
compatibility dashboard of ``--mc-report`` files.

One report: ``DIR/index.html``, the matrix as a coloured grid (requirements grouped by RFC
family down, targets across, version-skew pairs below); a cell opens its tests with outcome,
message, n/a reason, duration, seed and the command that runs the test again. Two reports: the
diff of the second against the first (``DIR/index.html``) beside the two grids
(``report-1.html``, ``report-2.html``). Every page is one file with its CSS inline and no
script: a cell is a link to its panel (CSS ``:target``), so the pages work from a file system,
a CI artifact or an air-gapped machine, with no server and no CDN. Jinja2 renders the template
(``dashboard.html.j2``) with autoescaping, so nothing a test printed can inject markup.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from pytest_mooncake.report.dashboard_model import (
    Diff,
    Grid,
    diff,
    grid,
    short_title,
    verdict_class,
)

HELP = "a static dashboard of one report, or of two with their diff"

TEMPLATE = "dashboard.html.j2"


class ReportUnreadable(Exception):
    """A report file that is missing, not JSON, or not a pytest-mooncake report."""


def read_report(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportUnreadable(f"{path}: no such report file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportUnreadable(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(doc, dict) or not (doc.get("columns") or doc.get("target")):
        raise ReportUnreadable(f"{path}: not a pytest-mooncake report (--mc-report): it has "
                               f"neither 'columns' nor 'target'")
    return doc


def template() -> jinja2.Template:
    source = resources.files("pytest_mooncake.report").joinpath(TEMPLATE).read_text("utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.globals.update(css=verdict_class, short=short_title)
    return env.from_string(source)


def page(kind: str, title: str, pages: list[dict[str, Any]], **values: Any) -> str:
    return template().render(kind=kind, title=title, pages=pages, **values)


def grid_page(g: Grid, title: str, pages: list[dict[str, Any]]) -> str:
    return page("grid", title, pages, g=g, facts=g.facts, problems=g.problems)


def diff_page(d: Diff, title: str, pages: list[dict[str, Any]], before_href: str,
              after_href: str) -> str:
    rows = [r for _, _, rows in d.families for r in rows] + list(d.pairs)
    facts = {"before": d.before.source, "after": d.after.source,
             "verdicts changed": str(len(d.changes()))}
    titles = {r.req: r.title for r in rows}
    return page("diff", title, pages, d=d, diff_rows=rows, facts=facts, problems=(),
                before_href=before_href, after_href=after_href, title_of=titles.get)


def write(reports: Sequence[Path], out: Path, title: str | None = None) -> list[Path]:
    """Write the dashboard of one report, or of two with their diff; the pages written."""
    if not 1 <= len(reports) <= 2:
        raise ValueError(f"give one report, or two to compare (got {len(reports)})")
    docs = [read_report(p) for p in reports]
    grids = [grid(doc, p.name, prefix=f"c{i}") for i, (doc, p) in enumerate(zip(docs, reports, strict=True))]
    out.mkdir(parents=True, exist_ok=True)
    if len(grids) == 1:
        target = out / "index.html"
        target.write_text(grid_page(grids[0], title or f"Conformance matrix · {grids[0].source}", []))
        return [target]
    names = ["index.html", "report-1.html", "report-2.html"]
    pages = [{"name": "diff", "href": names[0]},
             {"name": f"1: {grids[0].source}", "href": names[1]},
             {"name": f"2: {grids[1].source}", "href": names[2]}]

    def here(i: int) -> list[dict[str, Any]]:
        return [{**p, "here": j == i} for j, p in enumerate(pages)]

    texts = [diff_page(diff(grids[0], grids[1]), title or f"{grids[0].source} → {grids[1].source}",
                       here(0), names[1], names[2]),
             grid_page(grids[0], f"1: {grids[0].source}", here(1)),
             grid_page(grids[1], f"2: {grids[1].source}", here(2))]
    written = []
    for name, text in zip(names, texts, strict=True):
        (out / name).write_text(text)
        written.append(out / name)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json",
                        help="a --mc-report file; a second one adds the diff of the second "
                             "against the first")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                        help="directory to write the pages to (created; files replaced)")
    parser.add_argument("--title", help="the page title (default: the report's file name)")


def run(args: argparse.Namespace) -> int:
    try:
        written = write(args.reports, args.output, args.title)
    except (ReportUnreadable, ValueError) as exc:
        print(f"report html: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_mooncake.report html",
        description="A static dashboard of --mc-report files: the matrix as a grid whose cells "
                    "open their tests; with two reports, the diff of the second against the "
                    "first. No server, no network: every page has its CSS inline.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
