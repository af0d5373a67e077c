"""The plugin's markers: ``mc_req`` (requirements a test checks), ``mc_requires`` (means the
target must have: n/a without them) and ``mc_demands`` (interfaces the requirement itself
demands: FAIL without them); their registration, their validation after collection, and
``--mc-only``.
(``mc_skew`` belongs to ``fixtures/version_skew.py``.)"""

from __future__ import annotations

import pytest

from pytest_mooncake.config.item_facts import requirement_ids
from pytest_mooncake.report.catalogue import Catalogue
from pytest_mooncake.targets.base import Capability


def register(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mc_req(*IDS): the requirement(s) of the catalogue this test checks (e.g. 'MR-3'); "
        "keys the conformance matrix",
    )
    config.addinivalue_line(
        "markers",
        "mc_requires(*CAPABILITIES): means the target must have; otherwise the test is n/a "
        "with the target's reason. Capabilities: "
        + ", ".join(c.value for c in Capability),
    )
    config.addinivalue_line(
        "markers",
        "mc_demands(*CAPABILITIES): interfaces the requirement itself demands (a TTL bound, a "
        "promotability predicate, counters or log lines, a snapshot that restores what it "
        "reports): where the target lacks one the test FAILs naming what is missing, never n/a",
    )


def check_and_label(items: list[pytest.Item], catalogue: Catalogue) -> None:
    """Validate every ``mc_req``/``mc_requires`` mark (one usage error listing all problems),
    make requirement IDs ``-k`` keywords and give allure its epic/feature labels."""
    problems = []
    for item in items:
        for mark in item.iter_markers("mc_req"):
            if not mark.args:
                problems.append(f"{item.nodeid}: mc_req needs at least one requirement ID")
            for req in mark.args:
                if not isinstance(req, str) or req not in catalogue:
                    hint = catalogue.suggest(str(req))
                    problems.append(f"{item.nodeid}: unknown requirement {req!r} in mc_req ({hint})")
                    continue
                item.extra_keyword_matches.add(req)
                fam = catalogue.families[catalogue[req].family]
                item.add_marker(pytest.mark.allure_label(f"{fam.id}: {fam.name}", label_type="epic"))
                item.add_marker(pytest.mark.allure_label(feature_label(req, catalogue),
                                                         label_type="feature"))
        for name in ("mc_requires", "mc_demands"):
            for mark in item.iter_markers(name):
                for cap in mark.args:
                    try:
                        Capability(cap)
                    except ValueError:
                        known = ", ".join(c.value for c in Capability)
                        problems.append(
                            f"{item.nodeid}: unknown capability {cap!r} in {name} (known: {known})"
                        )
    if problems:
        raise pytest.UsageError("mooncake markers:\n  " + "\n  ".join(problems))


def feature_label(req: str, catalogue: Catalogue) -> str:
    """Allure's feature of a requirement test: ``MR-16 — its title`` (the tree reads as the
    catalogue does)."""
    return f"{req} — {catalogue[req].title}"


def select_only(config: pytest.Config, items: list[pytest.Item], only: tuple[str, ...],
                catalogue: Catalogue) -> None:
    """``--mc-only``: keep the tests naming one of ``only``; deselect the rest."""
    if not only:
        return
    unknown = [r for r in only if r not in catalogue]
    if unknown:
        raise pytest.UsageError(f"--mc-only: unknown requirement(s) {', '.join(unknown)} "
                                f"({catalogue.suggest(unknown[0])})")
    keep = [i for i in items if set(requirement_ids(i)) & set(only)]
    drop = [i for i in items if not set(requirement_ids(i)) & set(only)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def missing_means(item: pytest.Item, target: object,
                  marker: str = "mc_requires") -> tuple[Capability, str] | None:
    """The first capability of ``item``'s ``marker`` marks (``mc_requires`` or ``mc_demands``)
    that ``target`` lacks, with its reason."""
    for mark in item.iter_markers(marker):
        for cap in mark.args:
            reason = target.missing(cap)  # type: ignore[attr-defined]
            if reason:
                return Capability(cap), reason
    return None


def demanded(item: pytest.Item) -> frozenset[Capability]:
    """The capabilities ``item``'s requirement demands (``mc_demands``): lacking one is a FAIL."""
    return frozenset(Capability(cap) for mark in item.iter_markers("mc_demands")
                     for cap in mark.args)


def demand_failure(item: pytest.Item, capability: Capability, reason: str) -> str:
    """The failure message of a test whose requirement demands ``capability`` the target lacks."""
    reqs = ", ".join(requirement_ids(item)) or "its requirement"
    return (f"{reqs} demands {capability.value}, and the target lacks it: {reason}. A "
            f"requirement that itself demands an interface fails where the build has none "
            f"(the absence is the finding, not a missing means)")
