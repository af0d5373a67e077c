"""Processes still running when a session ends are a teardown leak: killed and reported as an
error. A nested session (pytester inline) leaves alone what its outer session owns. A leader
that exited on its own while its group still runs counts too (its descendants are the leak);
one that exited alone is only reaped."""

from __future__ import annotations

import pytest

from pytest_mooncake.runtime.processes import ProcessStopError, live_processes


def owned_before() -> set[int]:
    """Identities of the processes registered now (taken at session start)."""
    return {id(p) for p in live_processes()}


def reap_leaks(session: pytest.Session, outer: set[int]) -> None:
    """Kill what this session leaked, say so in red, and fail an otherwise green session."""
    lines = []
    for proc in live_processes():
        if id(proc) in outer:
            continue
        left = proc.group_members()
        running = proc.alive()
        try:
            proc.kill()
        except ProcessStopError as exc:
            lines.append(f"mooncake: {exc}")
            continue
        what = " ".join(proc.argv)[:120]
        if running:
            lines.append(f"mooncake: {proc.name} (pid {proc.pid}: {what}) was still alive at "
                         f"session end (a teardown leak); killed it")
        elif left:
            lines.append(f"mooncake: {proc.name} (pid {proc.pid}: {what}) exited, but its "
                         f"process group still ran pids {', '.join(map(str, left))} at session "
                         f"end (a teardown leak); killed them")
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line("ERROR " + line, red=True)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
