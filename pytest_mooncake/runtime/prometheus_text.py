"""The Prometheus text exposition format (``/metrics`` of mooncake_master and of the reference
master) read into ``{"name{labels}": value}``."""

from __future__ import annotations


def parse_metrics(text: str) -> dict[str, float]:
    """Every sample line as ``{"name{labels}": value}``; comments, blank lines and lines whose
    value is not a number are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
    return out
