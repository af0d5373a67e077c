"""The one rewriter of a generated Markdown region (pytest_mooncake/report/marked_region.py),
shared by scripts/judge_mooncake.py and scripts/judge_rdma_explorations.py."""

from __future__ import annotations

import pytest

from pytest_mooncake.report.marked_region import MarkedRegionError, Markers, update_page

MARKERS = Markers("<!-- x:start -->", "<!-- x:end -->")
PAGE = "# Page\n\nprose quoting <!-- x:start --> inline\n<!-- x:start -->\nold\n<!-- x:end -->\nafter\n"


def test_only_the_lines_between_the_marker_lines_change():
    assert MARKERS.replace(PAGE, "new\n") == PAGE.replace("\nold\n", "\nnew\n")


@pytest.mark.parametrize("page, said", [
    (PAGE.replace("<!-- x:end -->\n", ""), "docs/p.md holds no line <!-- x:end -->"),
    (PAGE.replace("<!-- x:start -->\nold", "old"), "docs/p.md holds no line <!-- x:start -->"),
    (PAGE + "<!-- x:end -->\n", "docs/p.md holds 2 lines <!-- x:end -->"),
    ("<!-- x:end -->\n<!-- x:start -->\n", "docs/p.md holds its line <!-- x:end --> before"),
    ("# no markers\n", "docs/p.md holds no line <!-- x:start -->: it must hold one line"),
])
def test_a_missing_repeated_or_misplaced_marker_is_named_with_the_file(page, said):
    with pytest.raises(MarkedRegionError, match=said):
        MARKERS.replace(page, "new\n", where="docs/p.md")


def test_an_appending_region_is_added_once_to_a_page_without_markers():
    appending = Markers(MARKERS.start, MARKERS.end, append=True)
    once = appending.replace("# Page\n", "one\n")
    assert once == "# Page\n\n<!-- x:start -->\none\n<!-- x:end -->\n"
    assert appending.replace(once, "one\n") == once


def test_update_page_writes_checks_and_refuses_a_page_without_its_markers(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    said = {"section": "x section", "source": "r.json", "regenerate": "make x"}
    assert update_page(page, MARKERS, "new\n", check=True, **said) == 1
    assert page.read_text() == PAGE
    assert "the x section is stale; run make x" in capsys.readouterr().err
    assert update_page(page, MARKERS, "new\n", check=False, **said) == 0
    assert "x section rewritten from r.json" in capsys.readouterr().out
    assert update_page(page, MARKERS, "new\n", check=True, **said) == 0
    page.write_text("# no markers\n")
    assert update_page(page, MARKERS, "new\n", check=False, **said) == 2
    assert f"{page} holds no line <!-- x:start -->" in capsys.readouterr().err
    assert page.read_text() == "# no markers\n"
