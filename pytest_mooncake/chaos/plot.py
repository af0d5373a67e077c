"""The latency and throughput plot of a chaos run, fault windows shaded (matplotlib, to PNG).

matplotlib rather than hand-made SVG: axes, log scales, ticks and legends are what it is for,
and it is maintained; it is imported here only, when a report is drawn. The figure is built
on a ``Figure`` object with the Agg canvas (no pyplot), so drawing from a test thread touches
no global state and needs no display.

Top: each completed worker operation's latency (invoke to completion) at its invoke time, by
outcome; violating operations ringed. Bottom: completions per second by outcome. Both share
the time axis with the shaded fault windows, a red dashed line at each heal a checker named
(e.g. not recovered from) and a dotted one where the final reads begin; a green bar marks
each measured recovery (heal to the first ok operation of any worker).
"""

from __future__ import annotations

import io
import math
from collections.abc import Collection, Mapping, Sequence

from pytest_mooncake.chaos.history import FAIL, INFO, NEMESIS, OK, Call
from pytest_mooncake.chaos.recovery import RecoveryTimes
from pytest_mooncake.chaos.windows import FaultWindow

COLOURS = {OK: "#2e9d4a", FAIL: "#d43d3d", INFO: "#f09a1a"}
FAULT_COLOURS = ["#7b61c4", "#3a7bd5", "#c4618d", "#8a6d3b", "#4aa3a3", "#777777"]
BINS = 80


def fault_colours(windows: Sequence[FaultWindow]) -> dict[str, str]:
    """One colour per fault label, stable in order of first injection (shared with the
    timeline, so a fault has the same colour in both)."""
    out: dict[str, str] = {}
    for w in windows:
        if w.label not in out:
            out[w.label] = FAULT_COLOURS[len(out) % len(FAULT_COLOURS)]
    return out


def _bin_width(seconds: float) -> float:
    """A round bin width giving about ``BINS`` bins."""
    raw = max(seconds, 0.1) / BINS
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= raw:
            return m * 10 ** exp
    return 10 ** (exp + 1)


def render_png(calls: Sequence[Call], windows: Sequence[FaultWindow], recovery: RecoveryTimes,
               violating: Collection[int] = (), title: str = "") -> bytes:
    """The plot as PNG bytes. ``violating`` holds indices of ops a checker named (a mapping
    to the checkers' names labels the heals among them)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    work = [c for c in calls if c.invoke.process != NEMESIS]
    end = max([c.completion.time for c in calls if c.completion is not None]
              + [c.start for c in calls] + [0]) / 1e9
    end = max(end, max((w.end(end) for w in windows), default=0.0), 0.1)
    fig = Figure(figsize=(12, 6.2), dpi=100)
    # fixed margins (room for the legends on the right): constrained layout tripled the time
    fig.subplots_adjust(left=0.06, right=0.79, top=0.95, bottom=0.08, hspace=0.06)
    lat, rate = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    colours = fault_colours(windows)
    for ax in (lat, rate):
        for w in windows:
            ax.axvspan(w.injected_at, w.end(end), color=colours[w.label], alpha=0.16, lw=0)
        ax.grid(True, alpha=0.3, lw=0.5)
        ax.set_xlim(0, end * 1.01)

    done = [c for c in work if c.completion is not None]
    for kind in (OK, FAIL, INFO):
        xs = [c.start / 1e9 for c in done if c.type == kind]
        ys = [max((c.completion.time - c.start) / 1e6, 1e-3) for c in done if c.type == kind]
        lat.scatter(xs, ys, s=7, color=COLOURS[kind], label=f"{kind} ({len(xs)})",
                    marker={OK: "o", FAIL: "x", INFO: "^"}[kind], linewidths=0.8, alpha=0.8)
    bad = [c for c in done if {op.index for op in c.ops} & set(violating)]
    if bad:
        lat.scatter([c.start / 1e9 for c in bad],
                    [max((c.completion.time - c.start) / 1e6, 1e-3) for c in bad], s=70,
                    facecolors="none", edgecolors="black", linewidths=1.2,
                    label=f"violating ({len(bad)})")
    heals_named = [op for c in calls if c.invoke.process == NEMESIS for op in c.ops
                   if op.type != "invoke" and op.index in set(violating)]
    finals = sorted(c.start / 1e9 for c in work if c.final)
    if done:
        lat.set_yscale("log")
    lat.set_ylabel("latency (ms)")
    lat.set_title(title, loc="left", fontsize=11)

    width = _bin_width(end)
    nbins = int(end / width) + 1
    centres = [(i + 0.5) * width for i in range(nbins)]
    for kind in (OK, FAIL, INFO):
        counts = [0] * nbins
        for c in done:
            if c.type == kind:
                counts[min(int(c.completion.time / 1e9 / width), nbins - 1)] += 1
        rate.plot(centres, [n / width for n in counts], color=COLOURS[kind], lw=1.2,
                  drawstyle="steps-mid", label=f"{kind}/s")
    top = rate.get_ylim()[1] or 1.0
    for f in recovery.faults:
        r = f.overall
        if r.seconds is not None and f.window.healed_at is not None:
            rate.plot([f.window.healed_at, f.window.healed_at + r.seconds], [top * 0.95] * 2,
                      color="#1b7f3a", lw=4, solid_capstyle="butt")
            rate.annotate(f"{r.seconds:.2f}s", (f.window.healed_at + r.seconds, top * 0.95),
                          xytext=(3, -3), textcoords="offset points", fontsize=7,
                          color="#1b7f3a", va="top")
    for ax in (lat, rate):
        for h in heals_named:
            ax.axvline(h.time / 1e9, color=COLOURS[FAIL], ls="--", lw=1.2)
        if finals:
            ax.axvline(finals[0], color="#555555", ls=":", lw=1)
    for h in heals_named:
        names = violating.get(h.index, ()) if isinstance(violating, Mapping) else ()
        rate.annotate(f"heal #{h.index}: " + (", ".join(names) or "violation"), (h.time / 1e9, top * 0.8), xytext=(3, 0),
                      textcoords="offset points", fontsize=7, color=COLOURS[FAIL])
    if finals:
        rate.annotate("final reads", (finals[0], top * 0.6), xytext=(-3, 0), ha="right",
                      textcoords="offset points", fontsize=7, color="#555555")
    rate.set_ylabel(f"completions/s ({width:g}s bins)")
    rate.set_xlabel("seconds since the run began")

    faults = [Patch(color=c, alpha=0.35, label=label) for label, c in colours.items()]
    handles, labels = lat.get_legend_handles_labels()
    lat.legend(handles + faults, labels + [p.get_label() for p in faults], fontsize=8,
               loc="upper left", bbox_to_anchor=(1.0, 1.0), title="ops / faults",
               title_fontsize=8)
    rate.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
