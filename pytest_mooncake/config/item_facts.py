"""What the configuration says about one collected test: the requirements it names and the
target it runs against."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_mooncake.config.stash_keys import MC_TARGET, MC_TARGETS

if TYPE_CHECKING:
    from pytest_mooncake.targets.base import Target


def requirement_ids(item: pytest.Item) -> list[str]:
    """The IDs of every ``mc_req`` mark on ``item``, in order, each once."""
    seen: list[str] = []
    for mark in item.iter_markers("mc_req"):
        seen.extend(r for r in mark.args if r not in seen)
    return seen


def target_for(item: pytest.Item) -> Target:
    """The target a test runs against: its matrix column, or the session's one target."""
    callspec = getattr(item, "callspec", None)
    label = callspec.params.get("mc_target") if callspec is not None else None
    targets = item.config.stash[MC_TARGETS]
    return targets[label] if label in targets else item.config.stash[MC_TARGET]


def skew_pair_id(item: pytest.Item) -> str | None:
    """The ``mc_skew`` pair a test runs under, if it is parametrized by one."""
    callspec = getattr(item, "callspec", None)
    pair = callspec.params.get("mc_skew") if callspec is not None else None
    return getattr(pair, "id", None)


def skew_pair_involves_target(item: pytest.Item, target_label: str) -> bool:
    """False for a test run under an ``mc_skew`` pair none of whose roles is the target under
    test (``target_label``): its outcome belongs to the pair's row, not to the target's
    column."""
    callspec = getattr(item, "callspec", None)
    pair = callspec.params.get("mc_skew") if callspec is not None else None
    return pair is None or pair.involves(target_label)
