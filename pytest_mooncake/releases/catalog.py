"""Which flavours PyPI publishes a Mooncake version in, and so the default flavour of a version.

``PUBLISHED`` is what ``pip index versions`` listed when it was last probed (see
``PUBLISHED_PROBED``); a version it does not list is asked of pip itself (one look-up per
distribution and process). Offline, an installed environment of the version decides.
The default is ``non-cuda`` where it exists (it runs on any machine), else ``cuda13``.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from collections.abc import Iterable

from pytest_mooncake.releases.spec import FLAVOURS, ReleaseSpec

PUBLISHED_PROBED = "2026-12-01, pip index versions"
PUBLISHED: dict[str, frozenset[str]] = {
    "non-cuda": frozenset({
        "0.3.7.post1", "0.3.7.post2", "0.3.8", "0.3.8.post1", "0.3.9", "0.3.10", "0.3.10.post1",
        "0.3.10.post2", "0.3.11", "0.3.11.post1", "0.3.12", "0.3.12.post1", "0.3.13",
        "0.3.13.post1"}),
    "cuda13": frozenset({
        "0.3.10", "0.3.10.post1", "0.3.10.post2", "0.3.11", "0.3.11.post1", "0.3.12",
        "0.3.12.post1", "0.3.13", "0.3.13.post1", "0.3.14"}),
}
PREFERENCE = ("non-cuda", "cuda13")
"""Default flavour order: the build that needs no CUDA first."""


@functools.cache
def pip_index_versions(distribution: str, python: str = sys.executable,
                       timeout: float = 60.0) -> frozenset[str] | None:
    """Versions of ``distribution`` pip can see, or None when pip could not tell (offline)."""
    try:
        out = subprocess.run(
            [python, "-m", "pip", "index", "versions", distribution, "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"^Available versions:\s*(.+)$", out.stdout, re.M)
    if out.returncode != 0 or not match:
        return frozenset() if "No matching distribution" in out.stderr + out.stdout else None
    return frozenset(v.strip() for v in match[1].split(",") if v.strip())


def published_flavours(version: str, *, ask_pip: bool = True) -> list[str]:
    """Flavours PyPI has ``version`` in, in preference order (the table first, then pip)."""
    known = [f for f in PREFERENCE if version in PUBLISHED.get(f, ())]
    if known or not ask_pip:
        return known
    return [f for f in PREFERENCE if version in (pip_index_versions(FLAVOURS[f].distribution) or ())]


def resolve(spec: ReleaseSpec, installed: Iterable[str] = (), *, ask_pip: bool = True
            ) -> ReleaseSpec:
    """``spec`` with a flavour: the one it names; else an installed environment's flavour
    (``installed``: flavours with an environment of this version); else the preferred one PyPI
    publishes. A version nobody publishes keeps the first preference, so pip's own
    "no matching distribution" error names it."""
    if spec.flavour is not None:
        return spec
    have = set(installed)
    for flavour in PREFERENCE:
        if flavour in have:
            return spec.with_flavour(flavour)
    found = published_flavours(spec.version, ask_pip=ask_pip)
    return spec.with_flavour(found[0] if found else PREFERENCE[0])

