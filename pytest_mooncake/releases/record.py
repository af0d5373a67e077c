"""Probed facts as plain data: a summary for people and the package's record of releases.

``probed/FLAVOUR-VERSION.json`` holds what ``probe VERSION --live --record`` saw on the
releases of record: which rows of the family table each has, its master flags with defaults,
metric names, admin endpoint statuses, descriptor fields. They are probe output, never edited
by hand; tests compare a fresh probe with them to notice a changed release or a broken probe.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pytest_mooncake.releases.facts import NotProbed, ProbeFailed, ReleaseFacts, schema

RECORD_DIR = Path(__file__).with_name("probed")


def _maybe(fn: Any) -> Any:
    try:
        return fn()
    except (NotProbed, ProbeFailed) as exc:
        return f"not known: {exc}"


def summary(facts: ReleaseFacts) -> dict[str, Any]:
    """Everything probed about one release, as JSON-able data (no Mooncake prose: flag
    descriptions and log text are left out)."""
    env, data = facts.env, facts.data
    out: dict[str, Any] = {
        "release": str(env.spec), "distribution": env.distribution, "version": env.version,
        "libraries": env.describe(), "standins": env.standins,
        "master_flags": _maybe(lambda: {
            name: {"type": f.type, "default": f.default}
            for name, f in sorted(facts.master_flags.items()) if "mooncake" in f.source}),
        "snapshot_means": _maybe(lambda: facts.snapshot_means),
        "client_ttl_flag": _maybe(lambda: facts.client_ttl_flag),
        "engine_methods": _maybe(lambda: sorted(facts.engine_methods)),
        "store_methods": _maybe(lambda: sorted(facts.store_methods)),
    }
    if "master" in data:
        master = data["master"]
        out.update(master_starts=master.get("started"), master_dropped=master.get("dropped"),
                   metrics=master.get("metrics"), admin=master.get("admin"),
                   log_lines=sorted(master.get("log", {})),
                   config_echo_keys=master.get("config_echo_keys"))
        if master.get("error"):
            out["master_error"] = master["error"]
    if "master_ha" in data:
        ha = data["master_ha"]
        health = ha.get("health") or {}
        out.update(ha_master_starts=bool(ha.get("started") and health.get("role") == "leader"),
                   ha_health={k: health.get(k) for k in ("role", "ha_state", "service_ready")})
        if ha.get("error") or health.get("error"):
            out["ha_error"] = ha.get("error") or health.get("error")
    if "engines" in data:
        eng = data["engines"]
        out.update(engine_round_trip=eng.get("round_trip"),
                   descriptor_fields=eng.get("descriptor_fields"))
        if eng.get("error"):
            out["engine_error"] = eng["error"]
    table: dict[str, dict[str, bool | None]] = {}
    for row, present in facts.table():
        table.setdefault(row.kind, {})[row.name] = present
    out["table"] = table
    return out


def write(facts: ReleaseFacts) -> Path:
    """Write ``probed/FLAVOUR-VERSION.json`` for this release."""
    RECORD_DIR.mkdir(exist_ok=True)
    doc = {"probed": dt.date.today().isoformat(), "schema": schema(), **summary(facts)}
    doc.pop("libraries", None)  # this machine's view, not a fact of the release
    doc.pop("standins", None)
    path = RECORD_DIR / f"{facts.env.spec.key}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def recorded(key: str) -> dict[str, Any] | None:
    """The record of ``FLAVOUR-VERSION``, or None."""
    try:
        return json.loads((RECORD_DIR / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
