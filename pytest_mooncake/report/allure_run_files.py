"""The files Allure reads beside the test results, written by the controller at session end
into ``--alluredir``: ``environment.properties`` (target, version, seed, etcd, verbs layer),
``executor.json`` (what ran the tests, a CI build where one is named) and ``categories.json``
(intermittent, FAIL, error and n/a as their own defect categories). The shipped ``allurerc.json``
(``pytest_mooncake/data/allure/``) makes Allure 3 group by RFC (epic) then requirement (feature).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import resources
from pathlib import Path

from pytest_mooncake.runtime.etcd_process import EtcdUnavailable, find_etcd
from pytest_mooncake.runtime.loopback_http import http_request

ALLURERC = Path(str(resources.files("pytest_mooncake").joinpath("data", "allure",
                                                                  "allurerc.json")))
"""Allure 3's configuration: ``npx allure generate DIR --config ALLURERC``."""

CATEGORIES = [
    {"name": "intermittent: failed and passed on re-runs with other seeds (--mc-confirm)",
     "matchedStatuses": ["failed", "broken"], "flaky": True},
    {"name": "FAIL: the target violates the requirement", "matchedStatuses": ["failed"]},
    {"name": "error: not judged (setup, teardown or a component that never started)",
     "matchedStatuses": ["broken"]},
    {"name": "n/a: the target lacks a means to drive or observe the test",
     "matchedStatuses": ["skipped"]},
]


def etcd_version(endpoints: tuple[str, ...], timeout: float = 5.0) -> str:
    """The version of the given etcd (its ``/version``), else of the binary the plugin starts;
    what went wrong in words when neither answers."""
    if endpoints:
        try:
            answer = http_request("GET", f"http://{endpoints[0]}/version", timeout=timeout)
            return f"{answer.json()['etcdserver']} ({endpoints[0]})"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"unknown ({endpoints[0]}/version: {exc})"
    try:
        binary = find_etcd()
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=timeout).stdout
    except (EtcdUnavailable, OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    first = out.splitlines()[0] if out else ""
    return f"{first.split(':', 1)[-1].strip() or 'unknown'} ({binary})"


def environment(targets: dict[str, dict[str, str]], seed: int, matrix: str | None,
                etcd: str, verbs: str) -> dict[str, str]:
    """The ``environment.properties`` entries."""
    env: dict[str, str] = {}
    if matrix:
        env["mooncake.matrix"] = matrix
    for label, facts in targets.items():
        key = "mooncake.target" if not matrix else f"mooncake.target.{label}"
        env[key] = label if not matrix else facts["version"]
        if not matrix:
            env["mooncake.target.version"] = facts["version"]
        if facts.get("notes"):
            env[f"mooncake.target.{label}.notes"] = facts["notes"]
    env.update({"mooncake.seed": str(seed), "mooncake.etcd": etcd, "mooncake.verbs": verbs,
                "python": platform.python_version(), "platform": platform.platform()})
    return env


def _escape(text: str) -> str:
    """A value for a Java properties file (backslashes, line breaks, ':' and '=')."""
    return (text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\:")
            .replace("=", "\\="))


def executor() -> dict[str, str]:
    """What ran the tests: a CI job where the usual variables name one, else this host."""
    name = ("GitHub Actions" if os.environ.get("GITHUB_ACTIONS") else
            "GitLab CI" if os.environ.get("GITLAB_CI") else
            "Jenkins" if os.environ.get("JENKINS_URL") else
            "CI" if os.environ.get("CI") else "local")
    out = {"name": f"pytest-mooncake ({name})", "type": name.lower().replace(" ", "-")}
    build = os.environ.get("GITHUB_RUN_ID") or os.environ.get("CI_PIPELINE_ID") or \
        os.environ.get("BUILD_NUMBER")
    if build:
        out["buildName"] = build
    url = os.environ.get("CI_PIPELINE_URL") or os.environ.get("BUILD_URL")
    if url:
        out["buildUrl"] = url
    return out


def write_run_files(directory: str | Path, env: dict[str, str]) -> None:
    """``environment.properties``, ``executor.json`` and ``categories.json`` in ``directory``."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / "environment.properties").write_text(
        "".join(f"{k}={_escape(v)}\n" for k, v in env.items()))
    (path / "executor.json").write_text(json.dumps(executor(), indent=2) + "\n")
    (path / "categories.json").write_text(json.dumps(CATEGORIES, indent=2) + "\n")
