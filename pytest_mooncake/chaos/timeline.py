"""A chaos run as one self-contained HTML page: verdict, faults and recovery, timeline, plot.

Jepsen's ``timeline.html`` in spirit, with time running left to right so that it lines up with
the plot: one lane per worker (see ``lanes``), the nemesis' own actions in the top lane, each
operation a bar from invoke to completion coloured by outcome (ok / fail / info; an op without
completion runs to the end, striped), each fault window a shaded band across every lane, each
recovery (heal to first ok) a bar under the fault's label, the operations a checker named
outlined and flagged. Hovering an operation shows its details; a violation in the verdict list
scrolls to it. The recovery figures are also embedded as JSON (``<script type="application/json"
id="mc-recovery">``, ``RecoveryTimes.to_json()``) for tools. Inline CSS, JS and SVG only (the plot a base64 PNG): the page needs no network
and opens from an allure report or a CI artifact as it is.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pytest_mooncake.chaos.checkers import Verdict
from pytest_mooncake.chaos.history import INFO, NEMESIS, Call, Op
from pytest_mooncake.chaos.lanes import lane_of, lanes
from pytest_mooncake.chaos.plot import fault_colours
from pytest_mooncake.chaos.recovery import RecoveryTimes
from pytest_mooncake.chaos.windows import FaultWindow, fault_kind

LANE_H = 26
BAR_H = 18
LABEL_W = 120
TOP = 58  # axis + fault labels + recovery bars
VERDICT_WORD = {True: "valid", False: "INVALID", None: "unknown"}


@dataclass
class Page:
    """What the page shows, gathered by ``report``."""

    title: str
    calls: Sequence[Call]
    workers: int | None
    windows: Sequence[FaultWindow]
    recovery: RecoveryTimes
    verdicts: Sequence[Verdict] = ()
    meta: Sequence[tuple[str, str]] = ()
    errors: Sequence[str] = ()
    plot_png: bytes | None = None
    violating: dict[int, list[str]] = field(default_factory=dict)
    """Op index -> names of the checkers that named it."""


def violations(verdicts: Sequence[Verdict]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for v in verdicts:
        for r in v.results:
            if r.valid is False:
                for op in r.ops:
                    names = out.setdefault(op.index, [])
                    if r.name not in names:
                        names.append(r.name)
    return out


def overall(verdicts: Sequence[Verdict]) -> bool | None | str:
    """False if any check failed, None if any was undecided, True if all passed, ``"not
    judged"`` when the test ran no checker."""
    if not verdicts:
        return "not judged"
    values = [v.valid for v in verdicts]
    if False in values:
        return False
    return None if None in values else True


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _badge(valid: bool | None | str) -> str:
    word = VERDICT_WORD.get(valid, str(valid)) if not isinstance(valid, str) else valid
    cls = {True: "good", False: "bad"}.get(valid, "unknown") if not isinstance(valid, str) \
        else "unknown"
    return f'<span class="badge {cls}">{_e(word)}</span>'


def render(page: Page) -> str:
    verdict = overall(page.verdicts)
    end = _end(page)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(page.title)}: {_e(VERDICT_WORD.get(verdict, verdict))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<header><h1>{_e(page.title)} {_badge(verdict)}</h1>",
        '<p class="meta">' + " · ".join(f"<b>{_e(k)}</b> {_e(v)}" for k, v in page.meta)
        + "</p>",
    ]
    for err in page.errors:
        parts.append(f'<p class="error">run error: {_e(err)}</p>')
    parts.append("</header>")
    parts.append(_verdict_section(page))
    parts.append(_faults_section(page))
    parts.append(_timeline_section(page, end))
    if page.plot_png:
        data = base64.b64encode(page.plot_png).decode()
        parts.append('<section id="plot"><h2>Latency and throughput</h2>'
                     f'<img alt="latency and throughput over time, fault windows shaded" '
                     f'src="data:image/png;base64,{data}"></section>')
    data = json.dumps(page.recovery.to_json()).replace("</", "<\\/")
    parts.append(f'<script type="application/json" id="mc-recovery">{data}</script>')
    parts.append(f'<div id="tip" role="tooltip"></div><script>{JS}</script></body></html>')
    return "\n".join(parts)


def _end(page: Page) -> float:
    times = [c.completion.time for c in page.calls if c.completion is not None]
    times += [c.start for c in page.calls]
    end = max(times, default=0) / 1e9
    return max([end, 0.001] + [w.healed_at or 0.0 for w in page.windows])


def _verdict_section(page: Page) -> str:
    out = ['<section id="verdict"><h2>Verdict</h2>']
    if not page.verdicts:
        out.append('<p class="muted">No checker ran on this history (the test did not call '
                   "<code>result.check(...)</code>), so nothing was judged.</p>")
    for n, v in enumerate(page.verdicts, 1):
        label = f"check {n}" if len(page.verdicts) > 1 else "checks"
        out.append(f"<h3>{_e(label)} {_badge(v.valid)}</h3><table class='checks'>")
        for r in v.results:
            out.append(f"<tr><td>{_badge(r.valid)}</td><td><b>{_e(r.name)}</b></td>"
                       f"<td><pre>{_e(r.explanation)}</pre></td></tr>")
        out.append("</table>")
    if page.violating:
        by_index = {op.index: (c, op) for c in page.calls for op in c.ops}
        out.append("<h3>Violating operations</h3><ul class='violations'>")
        for index in sorted(page.violating):
            if index not in by_index:
                continue
            call, op = by_index[index]
            out.append(f'<li><a href="#op-{call.invoke.index}" data-op="{call.invoke.index}">'
                       f"{_e(_op_text(call, op))}</a> <span class='muted'>named by "
                       f"{_e(', '.join(page.violating[index]))}</span></li>")
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _faults_section(page: Page) -> str:
    rec = page.recovery
    colours = fault_colours(page.windows)
    out = ['<section id="faults"><h2>Faults and recovery</h2>']
    if not rec.faults:
        out.append('<p class="muted">The nemesis injected no fault in this run.</p></section>')
        return "\n".join(out)
    out.append("<p class='muted'>Recovery: from the heal's completion to the first ok "
               "operation (not a final read) of any worker, of each worker, of the workers' "
               "operations on each target.</p>")
    out.append("<table class='recovery'><tr><th>fault</th><th>injected</th><th>healed</th>"
               "<th>held</th>" + "".join(f"<th>recovery: {_e(s)}</th>" for s in rec.scopes)
               + "</tr>")
    for f in rec.faults:
        w = f.window
        held = "" if w.healed_at is None else f"{w.healed_at - w.injected_at:.3f}s"
        cells = []
        for r in f.scopes:
            if r.seconds is not None:
                cells.append(f"<td class='ok-cell'>{r.seconds:.3f}s "
                             f"<span class='muted'>(#{r.first_ok})</span></td>")
            else:
                cls = "unmeasured-cell" if r.kind == "not measured" else "none-cell"
                cells.append(f"<td class='{cls}' title='{_e(r.why)}'>{_e(r.short)}</td>")
        notes = "".join(f"<div class='error'>{_e(e)}</div>" for e in w.errors)
        inst = f" <span class='muted'>→ {_e(w.instance)}</span>" if w.instance else ""
        out.append(f"<tr><td><span class='swatch' style='background:{colours[w.label]}'>"
                   f"</span>{_e(w.label)}{inst}{notes}</td><td>{w.injected_at:.3f}s</td>"
                   f"<td>{'never' if w.healed_at is None else f'{w.healed_at:.3f}s'}</td>"
                   f"<td>{held}</td>{''.join(cells)}</tr>")
    worst = rec.worst()
    out.append("<tr class='worst'><td colspan='4'>slowest measured</td>" + "".join(
        f"<td>{'-' if worst[s] is None else f'{worst[s]:.3f}s'}</td>" for s in rec.scopes)
        + "</tr></table></section>")
    return "\n".join(out)


def _ticks(end: float) -> float:
    raw = end / 12
    exp = math.floor(math.log10(raw))
    return next(m * 10 ** exp for m in (1, 2, 5, 10) if m * 10 ** exp >= raw)


def _timeline_section(page: Page, end: float) -> str:
    ops = [op for c in page.calls for op in c.ops]
    names = lanes(ops, page.workers)
    row = {name: i for i, name in enumerate(names)}
    scale = min(max(1000 / end, 120.0), 9000 / end)  # px per second
    width = int(end * scale) + 40
    height = TOP + LANE_H * len(names) + 22
    x = lambda t: 14 + t * scale  # noqa: E731
    colours = fault_colours(page.windows)
    body: list[str] = []
    labels = [f'<svg class="lanes" width="{LABEL_W}" height="{height}">']
    for name, i in row.items():
        y = TOP + i * LANE_H
        labels.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">{_e(name)}</text>')
        body.append(f'<rect class="lane{i % 2}" x="0" y="{y}" width="{width}" height="{LANE_H}"/>')
    labels.append("</svg>")

    step = _ticks(end)
    t = 0.0
    while t <= end + 1e-9:
        body.append(f'<line class="grid" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="14" '
                    f'y2="{height - 20}"/><text class="tick" x="{x(t):.1f}" y="11">{t:g}s</text>'
                    f'<text class="tick" x="{x(t):.1f}" y="{height - 6}">{t:g}s</text>')
        t = round(t + step, 9)

    for w in page.windows:
        x0, x1 = x(w.injected_at), x(w.end(end))
        body.append(f'<rect class="band" x="{x0:.1f}" y="16" width="{max(x1 - x0, 1):.1f}" '
                    f'height="{height - 36}" fill="{colours[w.label]}" data-d="{_e(_fault_text(w))}"/>')
        text = w.label if len(w.label) * 6.2 < x1 - x0 + 40 else w.kind
        body.append(f'<text class="flabel" x="{x0 + 2:.1f}" y="27" fill="{colours[w.label]}">'
                    f"{_e(text)}</text>")
    for f in page.recovery.faults:
        r, w = f.overall, f.window
        if w.healed_at is None:
            continue
        if r.seconds is not None:
            x0, x1 = x(w.healed_at), x(w.healed_at + r.seconds)
            body.append(f'<rect class="recovered" x="{x0:.1f}" y="34" width="{max(x1 - x0, 2):.1f}" '
                        f'height="6" data-d="{_e(f"{w.label}: recovered {r.seconds:.3f}s after the heal (first ok #{r.first_ok})")}"/>'
                        f'<text class="rlabel" x="{x1 + 3:.1f}" y="41">{r.seconds:.2f}s</text>')
        elif r.kind == "not recovered":
            x0, x1 = x(w.healed_at), x(end)
            body.append(f'<line class="unrecovered" x1="{x0:.1f}" x2="{x1:.1f}" y1="37" y2="37" '
                        f'data-d="{_e(f"{w.label}: {r.why}")}"/><text class="nlabel" '
                        f'x="{x0 + 3:.1f}" y="50">not recovered: {_e(r.short)}</text>')
        elif r.kind == "not measured":  # the next fault came first
            x0 = x(w.healed_at)
            body.append(f'<line class="unmeasured" x1="{x0:.1f}" x2="{x0 + 16:.1f}" y1="37" '
                        f'y2="37" data-d="{_e(f"{w.label}: recovery not measured: {r.why}")}"/>')

    for c in page.calls:
        lane = lane_of(c.invoke, page.workers)
        y = TOP + row[lane] * LANE_H + (LANE_H - BAR_H) / 2
        x0 = x(c.start / 1e9)
        stop = c.completion.time / 1e9 if c.completion is not None else end
        x1 = max(x(stop), x0 + 2)
        named = sorted({n for op in c.ops for n in page.violating.get(op.index, ())})
        cls = "nem" if c.invoke.process == NEMESIS else c.type
        if c.completion is None:
            cls += " open"
        if named:
            cls += " bad"
        fill = f' style="fill:{colours.get(_label(c), "#888")}"' if c.invoke.process == NEMESIS \
            else ""
        body.append(f'<rect id="op-{c.invoke.index}" class="op {cls}" x="{x0:.1f}" y="{y:.1f}" '
                    f'width="{x1 - x0:.1f}" height="{BAR_H}"{fill} '
                    f'data-d="{_e(_call_text(c, lane, named))}"/>')
        if named:
            body.append(f'<path class="flag" d="M{x0:.1f},{y - 1:.1f} l-4,-7 h8 z"/>')

    legend = ('<p class="legend"><span class="key ok"></span>ok <span class="key fail"></span>'
              'fail <span class="key info"></span>info (indeterminate) <span class="key open">'
              '</span>no completion <span class="key bad"></span>named by a checker '
              '<span class="key recovered"></span>recovery (heal → first ok) '
              '<span class="key unrec"></span>not recovered <span class="key unmeas"></span>'
              'not measured (next fault first)'
              + "".join(f' <span class="swatch" style="background:{c}"></span>{_e(label)}'
                        for label, c in colours.items()) + "</p>")
    return ('<section id="timeline"><h2>Timeline</h2>' + legend + '<div class="tl">'
            + "".join(labels) + f'<div class="scroll"><svg width="{width}" height="{height}">'
            + PATTERN + "".join(body) + "</svg></div></div></section>")


def _label(call: Call) -> str:
    return f"{fault_kind(call.invoke)}:{call.key}"


def _op_text(call: Call, op: Op) -> str:
    if op.process != NEMESIS:
        return op.describe()
    extra = f", new instance {op.instance}" if op.instance else ""
    error = f" ({op.error})" if op.error else ""
    done = "" if op.type == "invoke" else " done"
    return f"#{op.index} nemesis {op.f}{done}: {_label(call)} at {op.time / 1e9:.3f}s{extra}{error}"


def _fault_text(w: FaultWindow) -> str:
    healed = "never healed" if w.healed_at is None else \
        f"healed {w.healed_at:.3f}s (held {w.healed_at - w.injected_at:.3f}s)"
    extra = f"\nnew instance: {w.instance}" if w.instance else ""
    errors = "".join(f"\nerror: {e}" for e in w.errors)
    return f"fault {w.label}\ninjected {w.injected_at:.3f}s, {healed}{extra}{errors}"


def _call_text(c: Call, lane: str, named: Collection[str]) -> str:
    if c.invoke.process == NEMESIS:
        lines = [f"nemesis: {c.f} {_label(c)}"]
        if c.completion is None:
            lines.append("no completion (the action was still running when the history ended)")
        else:
            lines.append(f"failed: {c.completion.error}" if c.completion.error else "done")
    else:
        head = f"{c.f} {c.key if c.key is not None else ''}".rstrip()
        if c.argument is not None:
            head += f" ← {c.argument!r}"
        lines = [head]
        if c.completion is None:
            lines.append(f"{INFO}: no completion (pending when the history ended)")
        else:
            outcome = c.completion.type
            if c.completion.value is not None and c.completion.type != INFO:
                outcome += f" → {c.completion.value!r}"
            if c.completion.error:
                outcome += f" ({c.completion.error})"
            lines.append(outcome)
    done = "" if c.completion is None else \
        f", completed {c.completion.time / 1e9:.4f}s ({(c.completion.time - c.start) / 1e6:.2f} ms)"
    lines.append(f"invoked {c.start / 1e9:.4f}s{done}")
    ids = f"#{c.invoke.index}" + ("" if c.completion is None else f" → #{c.completion.index}")
    lines.append(f"process {c.invoke.process} ({lane}), ops {ids}")
    if c.instance:
        lines.append(f"{'new ' if c.invoke.process == NEMESIS else ''}instance {c.instance}")
    if named:
        lines.append("VIOLATION named by " + ", ".join(named))
    return "\n".join(lines)


PATTERN = ('<defs><pattern id="stripes" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f6c36b"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#b9770e" stroke-width="3"/></pattern></defs>')

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 20px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:10px 0 4px} .meta{margin:0;color:#444} .muted{color:#777}
.error{color:#b00020} pre{margin:0;white-space:pre-wrap;font-size:12px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
vertical-align:middle;color:#fff} .badge.good{background:#2e9d4a} .badge.bad{background:#d43d3d}
.badge.unknown{background:#888}
table{border-collapse:collapse;font-size:13px} td,th{padding:3px 8px;border:1px solid #e3e3e3;
vertical-align:top;text-align:left} th{background:#f5f5f5} .ok-cell{color:#1b7f3a}
.none-cell{color:#b00020;font-weight:600} .unmeasured-cell{color:#888} tr.worst td{font-weight:600;background:#fafafa}
.swatch{display:inline-block;width:11px;height:11px;margin:0 5px 0 8px;opacity:.6;
vertical-align:-1px;border-radius:2px}
.violations li{font-family:ui-monospace,monospace;font-size:12px}
.legend{font-size:12px;color:#444} .key{display:inline-block;width:18px;height:10px;
margin:0 4px 0 10px;vertical-align:0}
.key.ok,rect.ok{fill:#7fcf8e;background:#7fcf8e} .key.fail,rect.fail{fill:#ef8a8a;background:#ef8a8a}
.key.info,rect.info{fill:#f6c36b;background:#f6c36b}
.key.open{background:repeating-linear-gradient(45deg,#f6c36b 0 3px,#b9770e 3px 5px)}
rect.open{fill:url(#stripes)} .key.bad{outline:2px solid #000;background:#fff}
rect.bad{stroke:#000;stroke-width:2} .key.recovered,rect.recovered{fill:#1b7f3a;background:#1b7f3a}
.key.unrec{background:#b00020;height:4px;vertical-align:2px}
.key.unmeas{background:repeating-linear-gradient(90deg,#999 0 3px,transparent 3px 5px);height:4px;vertical-align:2px}
rect.nem{opacity:.9} path.flag{fill:#d43d3d}
.tl{display:flex;border:1px solid #ddd} .scroll{overflow-x:auto;flex:1}
svg text{font-size:11px;fill:#333} text.tick{text-anchor:middle;fill:#777;font-size:10px}
text.flabel{font-weight:600;font-size:11px} text.rlabel{fill:#1b7f3a;font-size:10px}
text.nlabel{fill:#b00020;font-size:10px} line.unrecovered{stroke:#b00020;stroke-width:3}
line.unmeasured{stroke:#999;stroke-width:3;stroke-dasharray:3 2}
line.grid{stroke:#eee} rect.lane0{fill:#fff} rect.lane1{fill:#f7f7f7}
rect.band{opacity:.16} rect.band:hover{opacity:.3}
rect.op:hover{stroke:#000;stroke-width:1} rect.flash{stroke:#d43d3d;stroke-width:4}
#plot img{max-width:100%;border:1px solid #ddd}
#tip{position:fixed;display:none;pointer-events:none;background:#222;color:#fff;padding:6px 8px;
border-radius:4px;font:12px/1.35 ui-monospace,monospace;white-space:pre;max-width:70vw;z-index:9}
"""

JS = """
(function(){
var tip=document.getElementById('tip');
document.addEventListener('mousemove',function(e){
  var d=e.target.getAttribute&&e.target.getAttribute('data-d');
  if(!d){tip.style.display='none';return;}
  tip.textContent=d;tip.style.display='block';
  var x=e.clientX+14,y=e.clientY+14,r=tip.getBoundingClientRect();
  if(x+r.width>innerWidth)x=e.clientX-r.width-10; if(y+r.height>innerHeight)y=e.clientY-r.height-10;
  tip.style.left=x+'px';tip.style.top=y+'px';});
document.querySelectorAll('a[data-op]').forEach(function(a){a.addEventListener('click',function(e){
  var el=document.getElementById('op-'+a.getAttribute('data-op')); if(!el)return;
  e.preventDefault(); el.scrollIntoView({behavior:'smooth',block:'center',inline:'center'});
  el.classList.add('flash'); setTimeout(function(){el.classList.remove('flash');},2500);});});
})();
"""
