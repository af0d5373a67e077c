"""allure-pytest, when it records: attachments, steps and parameters of the plugin's reports.

Every use goes through here so that a run without ``--alluredir`` (or without allure
installed) pays nothing and fails nothing."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest


def allure_results_dir(config: pytest.Config) -> str | None:
    """``--alluredir`` when allure-pytest is active in this run, else None."""
    if not config.pluginmanager.hasplugin("allure_pytest"):
        return None
    return config.getoption("allure_report_dir", None) or None


def allure_if_active(config: pytest.Config) -> Any:
    """The ``allure`` module when this run writes allure results, else None."""
    if allure_results_dir(config) is None:
        return None
    import allure  # noqa: PLC0415 (only when a report is made)

    return allure


def attach_text(config: pytest.Config, title: str, text: str) -> None:
    """Attach ``text`` to the current allure test result, when one is being recorded."""
    allure = allure_if_active(config)
    if allure is None:
        return
    try:
        allure.attach(text, name=title, attachment_type=allure.attachment_type.TEXT)
    except Exception:  # noqa: BLE001 (allure's listener may already have closed the test)
        pass


NODEID_LABEL = "mc_nodeid"
"""The label that names a requirement test's nodeid, so the controller can find its result
again once its re-runs are known (``allure_reruns``)."""


def target_parameter(config: pytest.Config, target: Any, seed: int,
                     nodeid: str | None = None) -> None:
    """Allure groups results by parameters: give a requirement test its target, and show the
    target's version and the run's seed (excluded from the history id, so a new seed or build
    continues the same test's history rather than starting another); label it with its
    ``nodeid``."""
    allure = allure_if_active(config)
    if allure is None:
        return
    allure.dynamic.parameter("target", target.label)
    allure.dynamic.parameter("target version", target.version, excluded=True)
    allure.dynamic.parameter("seed", str(seed), excluded=True)
    if nodeid:
        allure.dynamic.label(NODEID_LABEL, nodeid)


def step(title: str) -> contextlib.AbstractContextManager[Any]:
    """An allure step when allure is installed (it records only when a report is made)."""
    try:
        import allure  # noqa: PLC0415
    except ImportError:
        return contextlib.nullcontext()
    return allure.step(title)
