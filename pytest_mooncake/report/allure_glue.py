"""allure-pytest, when it records: attachments, steps and parameters of the plugin's reports.

Every use goes through here so that a run without ``--alluredir`` (or without allure
installed) pays nothing and fails nothing."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest


def allure_if_active(config: pytest.Config) -> Any:
    """The ``allure`` module when this run writes allure results, else None."""
    if not config.pluginmanager.hasplugin("allure_pytest") or not config.getoption(
        "allure_report_dir", None
    ):
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


def target_parameter(config: pytest.Config, label: str) -> None:
    """Allure groups results by parameters: give a requirement test its target."""
    allure = allure_if_active(config)
    if allure is not None:
        allure.dynamic.parameter("target", label)


def step(title: str) -> contextlib.AbstractContextManager[Any]:
    """An allure step when allure is installed (it records only when a report is made)."""
    try:
        import allure  # noqa: PLC0415
    except ImportError:
        return contextlib.nullcontext()
    return allure.step(title)
