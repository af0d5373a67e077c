"""The project's own tests: keep ``xdist_group`` working under pytest 9.

``scripts/run-tests.sh`` runs ``tests/`` with ``--dist loadgroup`` so that one worker builds each
expensive module fixture (the detection proof's suite run, the fast release suites) once.
pytest-xdist 3.8 tags a grouped test by assigning ``item._nodeid``; pytest 9 reads a node id
from ``item._id``, so the tag is lost and every grouped test is scheduled alone (measured:
the detection proof's 650 s fixture was built on both workers). This hook puts the tag where
pytest 9 reads it. It runs after xdist's own hook and does nothing where the tag arrived
(pytest < 9) or where no group applies (no ``--dist loadgroup``, no mark, a serial run)."""

from __future__ import annotations

import pytest


def group_names(item: pytest.Item) -> list[str]:
    """The item's xdist group names, as pytest-xdist spells them."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return sorted(names)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return  # only xdist workers under --dist loadgroup set it
    try:
        from _pytest.nodeid import coerce_node_id  # pytest >= 9
    except ImportError:
        return  # pytest < 9: xdist's own assignment reaches the node id
    for item in items:
        names = group_names(item)
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")
