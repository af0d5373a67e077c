"""Processes still alive when a session ends are a teardown leak: killed and reported as an
error. A nested session (pytester inline) leaves alone what its outer session owns."""

from __future__ import annotations

import pytest

from pytest_mooncake.runtime.processes import live_processes


def owned_before() -> set[int]:
    """Identities of the processes alive now (taken at session start)."""
    return {id(p) for p in live_processes()}


def reap_leaks(session: pytest.Session, outer: set[int]) -> None:
    """Kill what this session leaked, say so in red, and fail an otherwise green session."""
    leaked = [p for p in live_processes() if id(p) not in outer]
    for proc in leaked:
        proc.kill()
    if not leaked:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for proc in leaked:
        line = (f"mooncake: {proc.name} (pid {proc.pid}: {' '.join(proc.argv)[:120]}) was still "
                f"alive at session end (a teardown leak); killed it")
        if reporter is not None:
            reporter.write_line("ERROR " + line, red=True)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
