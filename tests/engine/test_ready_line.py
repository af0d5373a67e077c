"""A reference process's ready line reaches its log in one write, so no log line of another of
its threads can land between the JSON and its newline."""

from __future__ import annotations

import json

from reference_engine.ready_line import print_ready


class _Writes:
    """A stdout that records each write call (what reaches the log file as one syscall when
    stdout writes through)."""

    def __init__(self):
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        self.calls.append("<flush>")


def test_the_ready_line_is_one_write_then_a_flush(monkeypatch):
    out = _Writes()
    monkeypatch.setattr("sys.stdout", out)
    print_ready(segment="seg-a", control_port=1234)
    line, flush = out.calls
    assert flush == "<flush>"
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == {"event": "ready", "segment": "seg-a", "control_port": 1234}
