"""Which real releases the ``release`` tests run on, and what they do when PyPI is unreachable.

``MC_TEST_RELEASES``: comma-separated versions, or ``all``; default 0.3.13.post1 and 0.3.14
(what CI runs; ``scripts/setup.sh`` pre-installs them). Where pip cannot reach PyPI the tests
skip with pip's own message, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from pytest_mooncake.releases import ReleaseFetchError

ALL_RELEASES = ("0.3.10.post2", "0.3.11.post1", "0.3.12.post1", "0.3.13.post1", "0.3.14")
CI_RELEASES = ("0.3.13.post1", "0.3.14")


def selected_releases(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    raw = environ.get("MC_TEST_RELEASES", "").strip()
    if not raw:
        return CI_RELEASES
    if raw == "all":
        return ALL_RELEASES
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def skip_or_fail_unreachable(exc: ReleaseFetchError, environ: Mapping[str, str] = os.environ
                             ) -> None:
    """pip could not reach PyPI: skip with what pip said; under CI=true fail instead."""
    said = next((ln.strip() for ln in exc.output.splitlines() if "ERROR" in ln or "Error" in ln),
                str(exc))
    if environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true but pip cannot reach PyPI to install a release: {exc}")
    pytest.skip(f"pip cannot reach PyPI ({said[:200]})")
