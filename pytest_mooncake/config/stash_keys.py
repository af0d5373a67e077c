"""Where the resolved configuration lives on ``pytest.Config.stash``: one module the hooks
(``plugin.py``) and the fixtures both import, so neither imports the other."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    pass

MC_CONFIG = pytest.StashKey["McConfig"]()
"""The resolved options."""
MC_TARGETS = pytest.StashKey["dict[str, Target]"]()
"""Every target of the session by label (one, or a ``--mc-matrix``'s columns)."""
MC_TARGET = pytest.StashKey["Target"]()
"""The session's first (or only) target."""
MC_MATRIX = pytest.StashKey["ConformanceMatrix"]()
"""The conformance matrix the controller fills."""
PREEXISTING_PROCESSES = pytest.StashKey[set[int]]()
"""Processes alive before this session started (a nested pytester run must not reap them)."""
