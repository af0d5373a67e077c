"""The run's seed and each target's version as properties of the JUnit XML test suite
(``--junitxml``), so a CI system that keeps only the XML can still replay and name the build;
after re-runs (``--mc-confirm``), the verdict of each re-run cell with its k/N and seeds.

pytest's public ``record_testsuite_property`` fixture does not work under xdist; the plugin
adds the same global properties on the controller, through the junitxml plugin's own object.
"""

from __future__ import annotations

import pytest

from pytest_mooncake.report.conformance_matrix import ConformanceMatrix


def _logxml(config: pytest.Config):  # noqa: ANN202 (pytest's private LogXML)
    try:
        from _pytest.junitxml import xml_key  # noqa: PLC0415
    except ImportError:  # pragma: no cover (a pytest without it writes no XML we know)
        return None
    return config.stash.get(xml_key, None)


def add_run_properties(config: pytest.Config, seed: int, matrix: str | None,
                       targets: dict[str, dict[str, str]]) -> None:
    """``mooncake_seed``, ``mooncake_matrix`` (in a matrix run) and, per target,
    ``mooncake_target`` / ``mooncake_target_version`` (one target) or
    ``mooncake_target_version[LABEL]`` (a matrix)."""
    xml = _logxml(config)
    if xml is None:
        return
    xml.add_global_property("mooncake_seed", str(seed))
    if matrix:
        xml.add_global_property("mooncake_matrix", matrix)
    for label, facts in targets.items():
        if matrix:
            xml.add_global_property(f"mooncake_target_version[{label}]", facts["version"])
        else:
            xml.add_global_property("mooncake_target", label)
            xml.add_global_property("mooncake_target_version", facts["version"])
        if facts.get("notes"):
            xml.add_global_property(f"mooncake_target_notes[{label}]", facts["notes"])


def add_rerun_properties(config: pytest.Config, matrix: ConformanceMatrix) -> None:
    """Per cell whose failed tests were re-run (``--mc-confirm``):
    ``mooncake_verdict[CELL][REQ]`` = its verdict, k/N, the seeds of each outcome and the replay
    command of each failing test (the testcases were written before the re-runs)."""
    xml = _logxml(config)
    if xml is None:
        return
    for req, key in matrix.cells():
        tally = matrix.tally(req, key)
        if tally is None:
            continue
        value = f"{matrix.verdict(req, key)} {tally.ratio}: {tally.describe()}"
        replays = matrix.replays(req, key)
        if replays:
            value += "; replay: " + " ; ".join(replays)
        xml.add_global_property(f"mooncake_verdict[{key}][{req}]", value)
