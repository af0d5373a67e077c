"""The chaos report: recovery figures of a hand-built history, the HTML timeline parsed back,
and a real run against a real process writing both files next to its history."""

from __future__ import annotations

import json
import re
import struct
from html.parser import HTMLParser
from typing import Any

from kv_client import KvClient, start_server

from pytest_mooncake.chaos import generator as gen
from pytest_mooncake.chaos.checkers import bounded_recovery, check, no_phantom_reads
from pytest_mooncake.chaos.history import NEMESIS, History, Op
from pytest_mooncake.chaos.nemesis import process_kill
from pytest_mooncake.chaos.recovery import recovery_times
from pytest_mooncake.chaos.run_report import report_paths, write_report


class Script:
    """Ops at explicit times in ms; ``history()`` orders and numbers them."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def op(self, process: int | str, f: str, key: Any, start: float, end: float, type: str,
           value: Any = None, error: str | None = None, instance: str | None = None,
           final: bool = False) -> Script:
        self.events.append(dict(type="invoke", f=f, process=process, time=int(start * 1e6),
                                key=key, value=value if f != "read" else None, final=final))
        self.events.append(dict(type=type, f=f, process=process, time=int(end * 1e6), key=key,
                                value=value, error=error, instance=instance, final=final))
        return self

    def fault(self, verb: str, kind: str, subject: str, start: float, end: float,
              error: str | None = None, instance: str | None = None) -> Script:
        return self.op(NEMESIS, verb, subject, start, end, "info", {"fault": kind}, error,
                       instance)

    def history(self) -> History:
        ordered = sorted(self.events, key=lambda e: e["time"])
        return History([Op(index=i, **e) for i, e in enumerate(ordered)])


def scripted() -> History:
    """Two workers on targets A and B; pause:x never healed (its heal failed), kill:A
    recovered, partition:net cut short by the next kill, the second kill not recovered from."""
    return (Script()
            .op(0, "write", "A/0", 0, 10, "ok", "v0")
            .fault("inject", "pause", "x", 20, 25)
            .fault("heal", "pause", "x", 30, 40, error="heal pause:x: OSError: gone")
            .fault("inject", "kill", "A", 100, 105)
            .op(0, "write", "A/1", 110, 120, "fail", error="refused")
            .op(1, "write", "A/2", 130, 140, "info", "v1", error="timeout")
            .fault("heal", "kill", "A", 200, 300, instance="pid-2")
            .op(0, "write", "A/1", 310, 350, "ok", "v2")
            .op(3, "write", "B/0", 320, 400, "ok", "v3")  # worker 1, retired once (3 % 2)
            .op(3, "read", "A/2", 405, 420, "ok", "ghost")  # never written: a phantom
            .fault("inject", "partition", "net", 500, 505)
            .fault("heal", "partition", "net", 590, 600)
            .fault("inject", "kill", "A", 650, 655)
            .op(0, "write", "A/1", 660, 700, "ok", "v4")
            .fault("heal", "kill", "A", 760, 800, instance="pid-3")
            .op(2000, "read", "A/0", 880, 900, "ok", "v0", final=True)
            .op(0, "write", "A/3", 975, 1000, "fail", error="refused")
            .history())


def test_recovery_times_per_worker_and_target() -> None:
    history = scripted()
    rec = recovery_times(history, workers=2)
    assert rec.scopes == ("any worker", "worker 0", "worker 1", "A", "B")
    assert [f.window.label for f in rec.faults] == ["pause:x", "kill:A", "partition:net",
                                                    "kill:A"]
    unhealed, first, cut, lost = rec.faults
    assert first.window.instance == "pid-2"
    assert {r.scope: round(r.seconds, 3) for r in first.scopes} == {
        "any worker": 0.05, "worker 0": 0.05, "worker 1": 0.1, "A": 0.05, "B": 0.1}
    assert {r.kind for r in cut.scopes} == {"not measured"}
    assert "kill:A was injected 0.050s after the heal" in cut.overall.why
    # the final read at 0.9s is no recovery: reading a peer after the run proves nothing
    assert {r.kind for r in lost.scopes} == {"not recovered"}
    assert lost.overall.why == "no ok operation in the 0.200s the history went on after the heal"
    assert unhealed.window.healed_at is None and unhealed.overall.kind == "never healed"
    assert unhealed.window.errors == ("heal pause:x: OSError: gone",)
    assert rec.not_recovered() == [lost]
    doc = rec.to_json()
    assert doc["worst_seconds"] == {"any worker": 0.05, "worker 0": 0.05, "worker 1": 0.1,
                                    "A": 0.05, "B": 0.1}
    b_ok = next(op.index for op in history.ops if op.key == "B/0" and op.type == "ok")
    assert doc["faults"][1]["recovery"]["B"] == {"seconds": 0.1, "first_ok": b_ok,
                                                 "kind": "recovered"}
    assert "next fault first" in rec.table() and "no ok in 0.2s" in rec.table()


class Page(HTMLParser):
    """Parses the page strictly enough to catch unbalanced tags; keeps text and elements."""

    VOID = {"meta", "img", "br", "hr", "input", "link", "rect", "line", "path", "stop"}

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed tags: {self.stack}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def by_id(self, ident: str) -> dict[str, str]:
        return next(attrs for _, attrs in self.elements if attrs.get("id") == ident)


def test_timeline_names_every_fault_and_the_violations(tmp_path) -> None:
    history = scripted()
    verdict = check(history, bounded_recovery(0.1),
                    lambda h: no_phantom_reads(h, puts=("write",), reads=("read",)))
    assert verdict.valid is False
    path = tmp_path / "history-1.jsonl"
    html_path, png_path = write_report(history, path, title="chaos run 1", workers=2,
                                       verdicts=[verdict], meta=[("seed", "7")])
    assert (html_path, png_path) == report_paths(path)
    assert html_path.parent == png_path.parent == path.parent
    page = Page(html_path.read_text())
    text = " ".join(page.text)
    for label in ("kill:A", "partition:net", "pause:x"):
        assert label in text
    assert "INVALID" in text and "bounded-recovery" in text and "no-phantom-reads" in text
    phantom = next(op for op in history.ops if op.value == "ghost" and op.type == "ok")
    lost_heal = next(op for op in history.ops if op.f == "heal" and op.instance == "pid-3")
    calls = history.calls()
    for op in (phantom, lost_heal):
        invoke = next(c.invoke for c in calls if op in c.ops)
        assert "bad" in page.by_id(f"op-{invoke.index}")["class"].split()
        assert any(tag == "a" and attrs.get("href") == f"#op-{invoke.index}"
                   for tag, attrs in page.elements), "the violation list links the op"
    assert "0.050s" in text  # the measured recovery of the first kill
    embedded = re.search(r'<script type="application/json" id="mc-recovery">(.*?)</script>',
                         html_path.read_text()).group(1)
    assert json.loads(embedded) == recovery_times(history, workers=2).to_json()
    tips = [attrs["data-d"] for _, attrs in page.elements if "data-d" in attrs]
    assert any("read A/2" in t and "ghost" in t and "VIOLATION" in t for t in tips)
    for tag, attrs in page.elements:  # self-contained: nothing loaded from elsewhere
        assert tag != "link" and not (tag == "script" and "src" in attrs)
        assert attrs.get("src", "data:").startswith("data:")
        assert "://" not in attrs.get("href", "")
    png = png_path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1200, 620)


def test_a_real_run_writes_timeline_and_plot_beside_its_history(mc_chaos, mc_processes,
                                                                 tmp_path) -> None:
    port, server = start_server(mc_processes, tmp_path, "lossy")
    result = mc_chaos.run(lambda w: KvClient(port), gen.kv(keys=8).stagger(0.004),
                          [process_kill(server, "kv")], seconds=1.2, workers=2,
                          quiet=(0.1, 0.2), hold=(0.05, 0.1), final=gen.final_reads(8))
    history_path = mc_chaos.workdir / "history-1.jsonl"
    html_path, png_path = report_paths(history_path)
    assert (result.report.html, result.report.plot) == (html_path, png_path)
    assert "No checker ran" in html_path.read_text()
    result.check(bounded_recovery(5.0))
    page = Page(html_path.read_text())  # redrawn with the verdict
    assert "No checker ran" not in " ".join(page.text) and "bounded-recovery" in page.text
    assert png_path.read_bytes()[:4] == b"\x89PNG"
    kills = [op for op in result.history.ops if op.f == "inject" and op.type == "invoke"]
    assert kills and len(result.recovery.faults) == len(kills)
    assert "kill:kv" in " ".join(page.text)
    assert result.recovery.to_json()["scopes"] == ["any worker", "worker 0", "worker 1"]
    assert f"timeline: {html_path}" in result.report.text()
